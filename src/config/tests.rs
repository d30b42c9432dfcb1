use std::path::Path;

use super::*;
use crate::caller::Scope;
use crate::error::ErrorCode;
use crate::policy::Switch;

#[test]
fn providers_follow_the_environment_and_the_config_file() {
    let config: ConfigFile = toml::from_str(
        r#"
        default_model = "ollama:llama3.2"
        [providers.ollama]
        api = "openai"
        base_url = "http://127.0.0.1:11434/v1"
        context_window = 32768
        [providers.gateway]
        api = "anthropic"
        base_url = "http://127.0.0.1:9/anthropic"
        api_key_env = "GATEWAY_KEY"
        "#,
    )
    .unwrap();
    let registry = provider_registry(&config, &Environment::default());
    let error = registry.resolve("anthropic:claude-sonnet-4-5").unwrap_err();
    assert_eq!(error.code(), ErrorCode::AgentError);
    assert!(error.to_string().contains("ANTHROPIC_API_KEY"));
    assert!(registry.resolve("openai:gpt-4o-mini").unwrap_err().to_string().contains("OPENAI_API_KEY"));
    assert!(registry.resolve("gateway:claude").unwrap_err().to_string().contains("GATEWAY_KEY"));
    assert!(registry.resolve("ollama:llama3.2:3b").is_ok());
    assert_eq!(config.providers["ollama"].context_window, Some(32768));

    let env =
        Environment::from_pairs([("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"), ("ANTHROPIC_API_KEY", "k")]);
    let registry = provider_registry(&ConfigFile::default(), &env);
    assert!(registry.resolve("openai:llama3.2").is_ok(), "a compatible server needs no key");
    assert!(registry.resolve("anthropic:claude-sonnet-4-5").is_ok());
}

#[test]
fn the_tools_section_sets_session_defaults() {
    use crate::tools::BuiltinTool;
    let config: ConfigFile = toml::from_str(
        r#"
        [tools]
        builtins = ["read_file", "search"]
        shell = true
        shell_timeout_ms = 5000
        allow_inline_mcp_servers = false
        "#,
    )
    .unwrap();
    assert_eq!(config.tools.builtins, Some(vec![BuiltinTool::ReadFile, BuiltinTool::Search]));
    assert_eq!((config.tools.allow_shell, config.tools.allow_inline_mcp_servers), (None, Some(false)));
    assert!(config.tools.shell);
    assert_eq!((config.tools.shell_timeout_ms, config.tools.shell_max_output_bytes), (Some(5000), None));
    assert!(toml::from_str::<ConfigFile>("[tools]\nbuiltins = [\"rm\"]").is_err());
    assert!(toml::from_str::<ConfigFile>("[tools]\nshel = true").is_err());
}

#[test]
fn mcp_servers_and_the_pool_come_from_the_config_file() {
    let config: ConfigFile = toml::from_str(
        r#"
        [mcp_servers.files]
        command = "mcp-server-filesystem"
        args = ["/srv"]
        env = { LOG = "1" }
        idle_timeout_secs = 60
        [mcp_servers.web]
        url = "http://127.0.0.1:9/mcp"
        headers = { Authorization = "Bearer t" }
        [mcp_pool]
        idle_timeout_secs = 30
        max_idle_servers = 2
        "#,
    )
    .unwrap();
    assert_eq!(config.mcp_servers["files"].args, ["/srv"]);
    assert_eq!(config.mcp_servers["web"].headers["Authorization"].expose(), "Bearer t");
    let pool = crate::tools::mcp::McpPoolConfig::from(config.mcp_pool);
    assert_eq!((pool.idle_timeout.as_secs(), pool.max_idle), (30, 2));
    assert!(toml::from_str::<ConfigFile>("[mcp_servers.x]\ncommand = \"a\"\nurl2 = \"b\"").is_err());
}

#[test]
fn the_sessions_section_bounds_the_live_set_and_flags_override_it() {
    use std::time::Duration;
    let config: ConfigFile = toml::from_str("[sessions]\nidle_unload_secs = 60\nmax_live_sessions = 5").unwrap();
    let limits = Settings::default().session_limits(&config.sessions);
    assert_eq!(
        limits,
        SessionLimits { idle_unload: Duration::from_secs(60), max_live: 5, ..SessionLimits::default() }
    );
    let flags = Settings { max_live_sessions: Some(2), ..Settings::default() };
    assert_eq!(flags.session_limits(&config.sessions).max_live, 2);
    assert_eq!(flags.session_limits(&config.sessions).idle_unload, Duration::from_secs(60));
    assert_eq!(Settings::default().session_limits(&SessionsConfig::default()), SessionLimits::default());
    assert!(toml::from_str::<ConfigFile>("[sessions]\nmax_live = 5").is_err());
}

#[test]
fn policy_switches_and_auth_tokens_parse() {
    let config: ConfigFile = toml::from_str(
        r#"
        [policy]
        shell = "deny"
        inline_mcp_urls = "allow"
        [[auth.tokens]]
        subject = "alice"
        token_env = "ALICE_TOKEN"
        scopes = ["sessions", "shell"]
        [[auth.tokens]]
        subject = "ops"
        token_sha256 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
        scopes = ["sessions:all"]
        "#,
    )
    .unwrap();
    let switches = config.policy.switches();
    assert_eq!((switches.shell, switches.inline_mcp_commands), (Some(Switch::Deny), None));
    let env = Environment::from_pairs([("ALICE_TOKEN", " alice-0123456789abcdef ")]);
    let tokens = config.auth.resolve(&env).unwrap();
    assert_eq!(tokens[0].secret, TokenSecret::Plain("alice-0123456789abcdef".into()));
    assert_eq!(tokens[0].scopes, [Scope::Sessions, Scope::Shell]);
    let TokenSecret::Sha256(digest) = tokens[1].secret else { panic!("a digest") };
    assert_eq!(digest[..2], [0x9f, 0x86]);

    assert!(config.auth.resolve(&Environment::default()).is_err(), "an unset token_env");
    let short = Environment::from_pairs([("ALICE_TOKEN", "short")]);
    assert!(config.auth.resolve(&short).unwrap_err().to_string().contains("at least 16"));
    let anonymous: ConfigFile = toml::from_str(
        "[[auth.tokens]]\nsubject = \"anonymous\"\ntoken_env = \"ALICE_TOKEN\"\nscopes = [\"sessions\"]",
    )
    .unwrap();
    let refused = anonymous.auth.resolve(&env).unwrap_err().to_string();
    assert!(refused.contains("reserved for callers without a token"), "{refused}");
    for bad in [
        "[[auth.tokens]]\nsubject = \"a\"\nscopes = []",
        "[[auth.tokens]]\nsubject = \"a\"\ntoken_sha256 = \"abc\"\nscopes = []",
        "[[auth.tokens]]\nsubject = \"a\"\ntoken_env = \"X\"\ntoken_sha256 = \"abc\"\nscopes = []",
    ] {
        let config: ConfigFile = toml::from_str(bad).unwrap();
        assert!(config.auth.resolve(&Environment::default()).is_err(), "{bad}");
    }
    assert!(toml::from_str::<ConfigFile>("[policy]\nshell = \"maybe\"").is_err());
    assert!(toml::from_str::<ConfigFile>("[[auth.tokens]]\nsubject = \"a\"\nscopes = [\"root\"]").is_err());
    assert!(toml::from_str::<ConfigFile>("[[auth.tokens]]\nsubject = \"a\"\nscope = []").is_err());
}

#[test]
fn hooks_parse_and_bad_ones_are_refused_at_load() {
    use crate::hooks::HookEventKind;
    let config: ConfigFile = toml::from_str(
        r#"
        [[hooks]]
        event = "pre_tool_use"
        matcher = "write_file"
        command = ["/bin/guard", "--strict"]
        timeout_ms = 500
        on_error = "deny"
        [[hooks]]
        event = "turn_end"
        url = "http://127.0.0.1:9/hook"
        "#,
    )
    .unwrap();
    assert_eq!(config.hooks.len(), 2);
    assert_eq!((config.hooks[0].event, config.hooks[0].on_error), (HookEventKind::PreToolUse, Some(Switch::Deny)));
    assert!(Hooks::from_config(&config.hooks).is_ok());
    assert!(toml::from_str::<ConfigFile>("[[hooks]]\nevent = \"tool_use\"\ncommand = [\"x\"]").is_err());
    assert!(toml::from_str::<ConfigFile>("[[hooks]]\nevent = \"turn_end\"\ncmd = [\"x\"]").is_err());
    let settings = Settings { workspace: Some(std::env::temp_dir()), ..Settings::default() };
    let bad: ConfigFile =
        toml::from_str("[[hooks]]\nevent = \"pre_tool_use\"\nmatcher = \"(\"\ncommand = [\"x\"]").unwrap();
    let err =
        agent_factory(&settings, &Environment::default(), &bad, Arc::default(), None).unwrap_err().to_string();
    assert!(err.contains("[[hooks]] entry 0 (pre_tool_use): bad matcher regex"), "{err}");
}

#[test]
fn a_missing_config_file_is_fine_unless_named() {
    let missing = Path::new("/nonexistent/deputy.toml");
    assert_eq!(ConfigFile::load(missing, false).unwrap(), ConfigFile::default());
    assert!(ConfigFile::load(missing, true).is_err());
    let env = Environment::from_pairs([("HOME", "/home/u")]);
    assert_eq!(ConfigFile::default_path(&env).unwrap(), PathBuf::from("/home/u/.config/deputy/config.toml"));
    assert_eq!(default_store_path(&env).unwrap(), PathBuf::from("/home/u/.local/share/deputy/sessions.redb"));
    let env = Environment::from_pairs([("HOME", "/home/u"), ("XDG_DATA_HOME", "/data")]);
    assert_eq!(default_store_path(&env).unwrap(), PathBuf::from("/data/deputy/sessions.redb"));
}

#[test]
fn a_model_price_needs_all_four_rates_and_no_negative_one() {
    let priced = |rates: &str| {
        toml::from_str::<ConfigFile>(&format!(
            "[providers.gw]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n[providers.gw.models.\"m\"]\n{rates}"
        ))
    };
    let config = priced("input = 1\noutput = 2.5\ncache_write = 1.25\ncache_read = 0.1").unwrap();
    let price = config.providers["gw"].models["m"];
    assert_eq!((price.input.dollars(), price.output.dollars(), price.cache_read.dollars()), (1.0, 2.5, 0.1));
    let missing = priced("input = 1\noutput = 2\ncache_write = 1").unwrap_err().to_string();
    assert!(missing.contains("missing field `cache_read`"), "{missing}");
    let negative = priced("input = -1\noutput = 2\ncache_write = 1\ncache_read = 0").unwrap_err().to_string();
    assert!(negative.contains("not an amount of dollars"), "{negative}");
    let unknown = priced("input = 1\noutput = 2\ncache_write = 1\ncache_read = 0\nbatch = 1").unwrap_err();
    assert!(unknown.to_string().contains("unknown field `batch`"), "{unknown}");
}

#[test]
fn the_sandbox_defaults_follow_the_transport_and_the_file_wins() {
    use crate::sandbox::{NetworkPolicy, SandboxMode, SandboxSettings};
    let none = ConfigFile::default();
    assert_eq!(
        none.sandbox.settings(true),
        SandboxSettings { mode: SandboxMode::Required, network: NetworkPolicy::Deny }
    );
    assert_eq!(
        none.sandbox.settings(false),
        SandboxSettings { mode: SandboxMode::BestEffort, network: NetworkPolicy::Deny }
    );
    let config: ConfigFile = toml::from_str("[sandbox]\nmode = \"off\"\nnetwork = \"allow\"\n").unwrap();
    assert_eq!(
        config.sandbox.settings(true),
        SandboxSettings { mode: SandboxMode::Off, network: NetworkPolicy::Allow }
    );
    assert!(toml::from_str::<ConfigFile>("[sandbox]\nmode = \"strict\"").is_err());
    let server: ConfigFile = toml::from_str("[mcp_servers.files]\ncommand = \"x\"\nsandbox = false\n").unwrap();
    assert!(crate::tools::mcp::config::spec_of("files", &server.mcp_servers["files"]).unwrap().unconfined);
}
