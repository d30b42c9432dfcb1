//! Reciprocal rank fusion: several rankings of the same items become one, each item scoring
//! `Σ 1 / (K + rank)` over the rankings it is in (Cormack et al., 2009). It needs no score
//! calibration between BM25 and cosine similarity, which are not comparable.

use std::collections::HashMap;
use std::hash::Hash;

/// The usual constant: high ranks weigh more, but not overwhelmingly.
pub const K: f32 = 60.0;

/// `rankings` (each best first) fused, best first, with their fused scores.
pub fn fuse<T: Clone, Key: Eq + Hash>(rankings: &[Vec<T>], key: impl Fn(&T) -> Key) -> Vec<(f32, T)> {
    let mut scores: HashMap<Key, (f32, usize, T)> = HashMap::new();
    let mut order = 0;
    for ranking in rankings {
        for (rank, item) in ranking.iter().enumerate() {
            let entry = scores.entry(key(item)).or_insert_with(|| {
                order += 1;
                (0.0, order, item.clone())
            });
            entry.0 += 1.0 / (K + rank as f32 + 1.0);
        }
    }
    let mut fused: Vec<(f32, usize, T)> = scores.into_values().collect();
    // Ties keep the order items were first seen in (the first ranking's first).
    fused.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    fused.into_iter().map(|(score, _, item)| (score, item)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_in_both_rankings_rise_and_items_in_one_are_kept() {
        let lexical = vec!["a", "b", "c"];
        let dense = vec!["c", "d", "a"];
        let fused: Vec<&str> = fuse(&[lexical, dense], |item| *item).into_iter().map(|(_, item)| item).collect();
        assert_eq!(fused, ["a", "c", "b", "d"]);
    }
}
