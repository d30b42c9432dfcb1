use super::defaults::validate_callbacks;
use super::*;
use crate::caller::Caller;
use crate::error::ErrorCode;
use crate::policy::{Grants, Surface};
use crate::tools::builtin::OUTPUT_CAP_BYTES;

#[test]
fn an_operator_can_forbid_the_shell_and_inline_mcp_servers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Workspace::new(dir.path()).unwrap();
    let inline: McpServerRequest =
        serde_json::from_value(serde_json::json!({"name": "x", "command": "true"})).unwrap();
    let inline_url: McpServerRequest =
        serde_json::from_value(serde_json::json!({"name": "u", "url": "http://127.0.0.1:9/mcp"})).unwrap();
    let named = McpServerRequest::Named("files".into());
    let with_shell = || ToolRequest { shell: Some(ShellRequest::Enabled(true)), ..ToolRequest::default() };
    let with =
        |server: &McpServerRequest| ToolRequest { mcp_servers: vec![server.clone()], ..ToolRequest::default() };

    let open = ToolDefaults::default();
    let local = open.switches().grants(&Caller::local(), Surface::Local);
    assert!(open.resolve(with_shell(), Some(&server), &local).is_ok(), "allowed unless the operator says no");
    assert!(open.resolve(with(&inline), Some(&server), &local).is_ok());

    // The deprecated [tools] switches still deny.
    let locked =
        ToolDefaults { allow_shell: Some(false), allow_inline_mcp_servers: Some(false), ..ToolDefaults::default() };
    let grants = locked.switches().grants(&Caller::local(), Surface::Local);
    let shell = locked.resolve(with_shell(), Some(&server), &grants).unwrap_err();
    assert_eq!(shell.code(), ErrorCode::PolicyDenied);
    assert!(shell.to_string().contains("[policy] shell = \"deny\""), "{shell}");
    let inline_refused = locked.resolve(with(&inline), Some(&server), &grants).unwrap_err();
    assert!(inline_refused.to_string().contains("inline_mcp_commands"), "{inline_refused}");
    let url_refused = locked.resolve(with(&inline_url), Some(&server), &grants).unwrap_err();
    assert!(url_refused.to_string().contains("inline_mcp_urls"), "{url_refused}");
    assert!(locked.resolve(with(&named), Some(&server), &grants).is_ok(), "named servers stay available");
    assert!(locked.resolve(ToolRequest::default(), Some(&server), &grants).is_ok(), "no shell asked, none refused");
}

#[test]
fn f11_the_config_files_limits_are_ceilings() {
    let dir = tempfile::tempdir().unwrap();
    let server = Workspace::new(dir.path()).unwrap();
    let capped = ToolDefaults {
        shell_timeout_ms: Some(2000),
        shell_max_output_bytes: Some(65536),
        max_tool_output_cap_bytes: Some(4096),
        ..ToolDefaults::default()
    };
    let shell = |timeout_ms, max_output_bytes| ToolRequest {
        shell: Some(ShellRequest::Limits(ShellLimits { timeout_ms, max_output_bytes })),
        ..ToolRequest::default()
    };
    let grants = Grants::local();
    let longer = capped.resolve(shell(Some(10_000), None), Some(&server), &grants).unwrap_err();
    assert!(longer.to_string().contains("ceiling of 2000 ([tools] shell_timeout_ms)"), "{longer}");
    let more = capped.resolve(shell(None, Some(1 << 30)), Some(&server), &grants).unwrap_err();
    assert!(more.to_string().contains("[tools] shell_max_output_bytes"), "{more}");
    let less = capped.resolve(shell(Some(500), Some(100)), Some(&server), &grants).unwrap();
    assert_eq!(less.shell, Some(ShellConfig { timeout_ms: 500, max_output_bytes: 100 }));
    assert!(capped.check_tool_output_cap(Some(8192)).is_err());
    assert!(capped.check_tool_output_cap(Some(4096)).is_ok() && capped.check_tool_output_cap(None).is_ok());
}

#[test]
fn requests_resolve_against_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let server = Workspace::new(dir.path()).unwrap();
    let defaults = ToolDefaults::default();

    let all = defaults.resolve(ToolRequest::default(), Some(&server), &Grants::local()).unwrap();
    assert_eq!(all.builtins, BuiltinTool::ALL.to_vec());
    assert_eq!((all.workspace.as_deref(), all.shell), (Some(server.root()), None));

    let request = ToolRequest {
        builtins: Some(vec![BuiltinTool::Search, BuiltinTool::ReadFile, BuiltinTool::Search]),
        shell: Some(ShellRequest::Limits(ShellLimits { timeout_ms: Some(5), max_output_bytes: None })),
        ..ToolRequest::default()
    };
    let some = defaults.resolve(request, Some(&server), &Grants::local()).unwrap();
    assert_eq!(some.builtins, [BuiltinTool::ReadFile, BuiltinTool::Search]);
    assert_eq!(some.shell, Some(ShellConfig { timeout_ms: 5, max_output_bytes: OUTPUT_CAP_BYTES }));

    let configured = ToolDefaults {
        builtins: Some(vec![BuiltinTool::ListDir]),
        shell: true,
        shell_timeout_ms: Some(1000),
        shell_max_output_bytes: Some(10),
        ..ToolDefaults::default()
    };
    let from_file = configured.resolve(ToolRequest::default(), Some(&server), &Grants::local()).unwrap();
    assert_eq!(from_file.builtins, [BuiltinTool::ListDir]);
    assert_eq!(from_file.shell, Some(ShellConfig { timeout_ms: 1000, max_output_bytes: 10 }));
    let off = ToolRequest { shell: Some(ShellRequest::Enabled(false)), ..ToolRequest::default() };
    assert_eq!(configured.resolve(off, Some(&server), &Grants::local()).unwrap().shell, None);
}

#[test]
fn a_bad_workspace_or_limit_is_an_invalid_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let defaults = ToolDefaults::default();
    // Not below an allowed root (here there is none): the operator's rule refuses it, alike
    // whether it exists, so the field is no oracle.
    for workspace in [dir.path().join("missing"), file] {
        let request = ToolRequest { workspace: Some(workspace), ..ToolRequest::default() };
        assert_eq!(defaults.resolve(request, None, &Grants::local()).unwrap_err().code(), ErrorCode::PolicyDenied);
    }
    let zero = ShellRequest::Limits(ShellLimits { timeout_ms: Some(0), max_output_bytes: None });
    let request = ToolRequest { shell: Some(zero), workspace: Some(dir.path().into()), ..ToolRequest::default() };
    let server = Workspace::new(dir.path()).unwrap();
    assert_eq!(
        defaults.resolve(request, Some(&server), &Grants::local()).unwrap_err().code(),
        ErrorCode::InvalidRequest
    );
    // Without any workspace, asking for tools is an error; not asking gives none.
    let shell = ToolRequest { shell: Some(ShellRequest::Enabled(true)), ..ToolRequest::default() };
    assert_eq!(defaults.resolve(shell, None, &Grants::local()).unwrap_err().code(), ErrorCode::InvalidRequest);
    assert_eq!(defaults.resolve(ToolRequest::default(), None, &Grants::local()).unwrap(), ToolConfig::none());
}

#[test]
fn callbacks_may_not_take_the_name_of_a_builtin_or_the_shell() {
    let callback = |name: &str| CallbackTool {
        name: name.into(),
        description: String::new(),
        input_schema: serde_json::json!({"type": "object"}),
    };
    for taken in ["read_file", "search", "shell"] {
        let refused = validate_callbacks(&[callback(taken)]).unwrap_err();
        assert!(refused.to_string().contains("has the name of a builtin tool"), "{taken}: {refused}");
    }
    assert!(validate_callbacks(&[callback("read_files"), callback("notify")]).is_ok());
}

#[test]
fn builtin_names_are_their_serde_names() {
    for tool in BuiltinTool::ALL {
        assert_eq!(serde_json::to_value(tool).unwrap(), tool.name());
    }
}

#[test]
fn unknown_builtin_names_do_not_parse() {
    let parsed: Result<Vec<BuiltinTool>, _> = serde_json::from_str(r#"["read_file", "rm_rf"]"#);
    assert!(parsed.unwrap_err().to_string().contains("rm_rf"));
    let shell: ShellRequest = serde_json::from_str(r#"{"timeout_ms": 10}"#).unwrap();
    assert_eq!(shell, ShellRequest::Limits(ShellLimits { timeout_ms: Some(10), max_output_bytes: None }));
    assert!(serde_json::from_str::<ShellRequest>(r#"{"timeout": 10}"#).is_err());
}

#[test]
fn the_skill_tools_need_no_workspace_and_a_child_gets_them_only_from_its_parent() {
    for tool in BuiltinTool::SKILLS {
        assert_eq!(serde_json::to_value(tool).unwrap(), tool.name());
        assert!(!tool.needs_workspace() && !tool.writes() && !BuiltinTool::ALL.contains(&tool));
    }
    let request = ToolRequest { builtins: Some(BuiltinTool::SKILLS.to_vec()), ..ToolRequest::default() };
    let without_workspace = ToolDefaults::default().resolve(request, None, &Grants::local()).unwrap();
    assert_eq!(without_workspace.builtins, BuiltinTool::SKILLS);
    let audit = AuditTag::local(crate::ids::SessionId::from_string("s"));
    assert!(without_workspace.scope(None, &audit, SandboxSettings::default()).is_ok());

    let parent = ToolConfig {
        builtins: vec![BuiltinTool::ReadFile, BuiltinTool::LoadSkill, BuiltinTool::ReadSkillFile],
        ..ToolConfig::none()
    };
    assert_eq!(parent.narrow(&DelegateArgs::default()).unwrap().builtins, parent.builtins);
    let asked = DelegateArgs { builtins: Some(vec![BuiltinTool::LoadSkill]), ..DelegateArgs::default() };
    assert_eq!(parent.narrow(&asked).unwrap().builtins, [BuiltinTool::LoadSkill]);
    let refused = ToolConfig::legacy().narrow(&asked).unwrap_err();
    assert!(refused.to_string().contains("load_skill is not among this session's tools"), "{refused}");
}
