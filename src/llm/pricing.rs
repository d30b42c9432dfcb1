//! What model calls cost: a [`Price`] per model (USD per million tokens of each kind the
//! providers bill) and [`Usd`], the amount it comes to.
//!
//! Money is kept as whole picodollars (10⁻¹² USD) rather than `f64`: a price with up to six
//! decimals times a token count is then exact, sums do not drift over a long session, a budget
//! compares with `>=` without an epsilon, and [`crate::model::Budget`] keeps its `Eq`. Only the
//! wire sees dollars, as a JSON number. The built-in list prices are data in
//! [`super::catalog`]; the config file may override them per model.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Usage;

/// Picodollars in a dollar.
const PICOS_PER_USD: f64 = 1e12;

/// An amount of US dollars, exact to the picodollar; a JSON number of dollars on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u64);

impl Usd {
    pub const ZERO: Usd = Usd(0);

    /// `mills` thousandths of a dollar: every list price of the built-in table is a whole
    /// number of them.
    pub const fn from_mills(mills: u64) -> Self {
        Self(mills * 1_000_000_000)
    }

    pub const fn from_picos(picos: u64) -> Self {
        Self(picos)
    }

    pub const fn picos(self) -> u64 {
        self.0
    }

    /// `dollars` rounded to the picodollar; `None` for a negative or non-finite amount (an
    /// amount too large for a `u64` of picodollars, over 18 million dollars, saturates).
    pub fn from_dollars(dollars: f64) -> Option<Self> {
        if !dollars.is_finite() || dollars < 0.0 {
            return None;
        }
        // `as` saturates a float beyond the integer's range, which is the intent here.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let picos = (dollars * PICOS_PER_USD).round() as u64;
        Some(Self(picos))
    }

    /// The amount in dollars, as the wire shows it.
    #[allow(clippy::cast_precision_loss)]
    pub fn dollars(self) -> f64 {
        self.0 as f64 / PICOS_PER_USD
    }

    pub fn saturating_add(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }

    pub fn saturating_sub(self, other: Usd) -> Usd {
        Usd(self.0.saturating_sub(other.0))
    }

    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

impl std::ops::AddAssign for Usd {
    fn add_assign(&mut self, other: Usd) {
        *self = self.saturating_add(other);
    }
}

impl std::iter::Sum for Usd {
    fn sum<I: Iterator<Item = Usd>>(iter: I) -> Usd {
        iter.fold(Usd::ZERO, Usd::saturating_add)
    }
}

/// `$0.0105`: enough decimals for the cost of a single small call.
impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dollars = self.dollars();
        if dollars >= 1.0 { write!(f, "${dollars:.2}") } else { write!(f, "${dollars:.4}") }
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Self::from_dollars(dollars).ok_or_else(|| {
            serde::de::Error::custom(format!("{dollars} is not an amount of dollars (a number, 0 or more)"))
        })
    }
}

impl JsonSchema for Usd {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Usd".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number", "minimum": 0 })
    }
}

/// A model's price, in USD per million tokens of each kind its provider bills. `input` is the
/// price of prompt tokens neither read from nor written to a cache ([`Usage::input_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: Usd,
    pub output: Usd,
    /// Prompt tokens written to the cache (Anthropic bills them 1.25× input for the 5-minute
    /// cache; OpenAI caches without a surcharge, so there it equals `input`).
    pub cache_write: Usd,
    /// Prompt tokens read from the cache.
    pub cache_read: Usd,
}

impl Price {
    /// An Anthropic list price: cache writes (5-minute TTL) are 1.25× input, reads 0.1×.
    pub const fn anthropic(input_mills: u64, output_mills: u64) -> Self {
        Self {
            input: Usd::from_mills(input_mills),
            output: Usd::from_mills(output_mills),
            cache_write: Usd::from_mills(input_mills * 5 / 4),
            cache_read: Usd::from_mills(input_mills / 10),
        }
    }

    /// An OpenAI list price: cached input has its own price, writing the cache costs nothing
    /// extra.
    pub const fn openai(input_mills: u64, cached_mills: u64, output_mills: u64) -> Self {
        Self {
            input: Usd::from_mills(input_mills),
            output: Usd::from_mills(output_mills),
            cache_write: Usd::from_mills(input_mills),
            cache_read: Usd::from_mills(cached_mills),
        }
    }

    /// This price where cache writes last an hour: Anthropic bills those 2× input (the
    /// 5-minute writes of the list price are 1.25×).
    pub fn with_hour_cache_writes(self) -> Self {
        Self { cache_write: Usd(self.input.0.saturating_mul(2)), ..self }
    }

    /// What `usage` costs at this price, rounded to the picodollar once, at the end.
    pub fn cost(&self, usage: &Usage) -> Usd {
        let term = |tokens: u64, per_mtok: Usd| u128::from(tokens) * u128::from(per_mtok.picos());
        let per_mtok = term(usage.input_tokens, self.input)
            + term(usage.output_tokens, self.output)
            + term(usage.cache_creation_input_tokens, self.cache_write)
            + term(usage.cache_read_input_tokens, self.cache_read);
        let picos = (per_mtok + 500_000) / 1_000_000;
        Usd(u64::try_from(picos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: write,
        }
    }

    #[test]
    fn a_cost_prices_each_kind_of_token_at_its_rate() {
        let sonnet = Price::anthropic(3_000, 15_000);
        assert_eq!(sonnet.cache_write, Usd::from_mills(3_750));
        assert_eq!(sonnet.with_hour_cache_writes().cache_write, Usd::from_mills(6_000));
        assert_eq!(sonnet.cache_read, Usd::from_mills(300));
        // 1000 × $3 + 500 × $15 + 2000 × $0.30 + 400 × $3.75, per million.
        let cost = sonnet.cost(&usage(1000, 500, 2000, 400));
        assert_eq!(cost.dollars(), 0.0126);
        assert_eq!(sonnet.cost(&Usage::default()), Usd::ZERO);
    }

    #[test]
    fn sub_cent_prices_are_exact_and_sums_do_not_drift() {
        let nano = Price::openai(50, 5, 400);
        assert_eq!(nano.cache_write, nano.input, "OpenAI has no cache-write surcharge");
        let one = nano.cost(&usage(1, 1, 1, 0));
        assert_eq!(one, Usd::from_picos(50_000 + 400_000 + 5_000));
        let total: Usd = std::iter::repeat_n(one, 1_000_000).sum();
        assert_eq!(total.dollars(), 0.455, "a million calls add up exactly");
    }

    #[test]
    fn dollars_round_trip_and_refuse_what_is_not_an_amount() {
        let amount: Usd = serde_json::from_str("0.25").unwrap();
        assert_eq!(amount, Usd::from_mills(250));
        assert_eq!(serde_json::to_string(&amount).unwrap(), "0.25");
        assert!(serde_json::from_str::<Usd>("-1").is_err());
        assert_eq!(Usd::from_dollars(f64::NAN), None);
        assert_eq!(Usd::from_dollars(1e300), Some(Usd::from_picos(u64::MAX)), "saturates");
        assert_eq!(Usd::from_mills(12).to_string(), "$0.0120");
        assert_eq!(Usd::from_mills(12_345).to_string(), "$12.35");
    }
}
