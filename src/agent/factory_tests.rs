//! The factory's pricing and context windows, through `build_agent`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{AgentBuildConfig, AgentFactory, RestoredState};
use crate::llm::Usage;
use crate::llm::pricing::Price;
use crate::llm::registry::ProviderRegistry;
use crate::llm::scripted::ScriptedProvider;
use crate::model::Budget;
use crate::policy::{AuditTag, Grants};

#[tokio::test]
async fn a_configured_window_applies_to_the_provider_and_a_model_entry_wins() {
    let mut registry = ProviderRegistry::new();
    registry.insert("local", ScriptedProvider::new([]));
    let windows = BTreeMap::from([("local".to_owned(), 9_000), ("local:big".to_owned(), 64_000)]);
    let factory = AgentFactory::new(Arc::new(registry), None, None).with_default_max_tokens(1000);
    let factory = factory.with_context_windows(windows);
    let build = |model: &str| AgentBuildConfig { model: Some(model.into()), ..AgentBuildConfig::default() };
    let (grants, audit) = (Grants::local(), AuditTag::local(crate::ids::SessionId::from_string("s")));
    let window = async |model| {
        factory.build_agent(build(model), &grants, &audit).await.unwrap().spec().context.context_window
    };
    assert_eq!(window("local:small").await, 9_000);
    assert_eq!(window("local:big").await, 64_000);
}

#[tokio::test]
async fn a_session_is_priced_by_its_model_and_an_old_spend_from_its_tokens() {
    use crate::llm::pricing::Usd;

    let mut registry = ProviderRegistry::new();
    registry.insert("anthropic", ScriptedProvider::new([]));
    registry.insert("local", ScriptedProvider::new([]));
    let custom = Price::openai(1_000, 100, 2_000);
    let factory = AgentFactory::new(Arc::new(registry), None, None)
        .with_prices(BTreeMap::from([("local:m".to_owned(), custom)]));
    let (grants, audit) = (Grants::local(), AuditTag::local(crate::ids::SessionId::from_string("s")));
    let build = |model: &str, budget: Budget| AgentBuildConfig {
        model: Some(model.into()),
        budget,
        ..AgentBuildConfig::default()
    };
    let tokens = Usage { input_tokens: 1000, output_tokens: 500, ..Usage::default() };

    let mut sonnet = factory
        .build_agent(build("anthropic:claude-sonnet-4-5", Budget::default()), &grants, &audit)
        .await
        .unwrap();
    assert_eq!(sonnet.cost(), Some(Usd::ZERO));
    // A record stored before costs were kept: priced from its tokens.
    sonnet.restore(RestoredState { usage: tokens, cost: None, ..RestoredState::default() });
    assert_eq!(sonnet.cost().map(Usd::dollars), Some(0.0105));
    // A stored spend is kept as it was, whatever today's price.
    sonnet.restore(RestoredState { usage: tokens, cost: Some(Usd::from_mills(1)), ..RestoredState::default() });
    assert_eq!(sonnet.cost(), Some(Usd::from_mills(1)));

    let hourly = factory.clone().with_hour_cache_providers(["anthropic".to_owned()].into());
    let written = Usage { cache_creation_input_tokens: 1000, ..Usage::default() };
    assert_eq!(hourly.price_of("anthropic:claude-sonnet-4-5").unwrap().cost(&written).dollars(), 0.006);
    assert_eq!(factory.price_of("anthropic:claude-sonnet-4-5").unwrap().cost(&written).dollars(), 0.00375);

    let local = factory.build_agent(build("local:m", Budget::default()), &grants, &audit).await.unwrap();
    assert_eq!(local.cost_of(&tokens).map(Usd::dollars), Some(0.002), "the configured price");
    let unknown = factory.build_agent(build("local:other", Budget::default()), &grants, &audit).await.unwrap();
    assert_eq!((unknown.cost(), unknown.cost_of(&tokens)), (None, None));

    let limited = Budget { max_cost_usd: Some(Usd::from_mills(10)), ..Budget::default() };
    let refused = factory.build_agent(build("local:other", limited), &grants, &audit).await.unwrap_err();
    assert_eq!(refused.code(), crate::error::ErrorCode::InvalidRequest);
    assert!(refused.to_string().contains("local:other"), "{refused}");
    assert!(factory.build_agent(build("local:m", limited), &grants, &audit).await.is_ok());
}
