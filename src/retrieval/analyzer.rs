//! The one text analyzer of deputy's indexes: words lowercased, English stop words out (a
//! question's "what is the" must not match every passage), stemmed ("indexes" finds "index").
//! Analyzers are not kept in a tantivy index, so every index registers it when it opens.

use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, Term};

/// Its name in an index's tokenizers.
pub const ANALYZER: &str = "deputy_en";

/// Registers the analyzer on `index` (at every open).
pub fn register(index: &Index) {
    let mut builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .dynamic();
    // tantivy ships English stop words with its `stopwords` feature, which deputy builds with.
    if let Some(stop_words) = StopWordFilter::new(Language::English) {
        builder = builder.filter_dynamic(stop_words);
    }
    let analyzer = builder.filter_dynamic(Stemmer::new(Language::English)).build();
    index.tokenizers().register(ANALYZER, analyzer);
}

/// The options of a searched text field: analyzed, with frequencies and positions, not stored.
pub fn text_options() -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    )
}

/// A query matching any word of `query` in `field`, scored by BM25; `None` when `query` has no
/// word worth searching (only stop words, say). Free text, never query syntax: a model's `:`
/// or `-` is a character, not an operator.
pub fn any_word(index: &Index, field: Field, query: &str) -> tantivy::Result<Option<Box<dyn Query>>> {
    let clauses: Vec<(Occur, Box<dyn Query>)> = terms(index, field, query)?
        .into_iter()
        .map(|word| -> (Occur, Box<dyn Query>) {
            let term = Term::from_field_text(field, &word);
            (Occur::Should, Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)))
        })
        .collect();
    Ok((!clauses.is_empty()).then(|| Box::new(BooleanQuery::new(clauses)) as Box<dyn Query>))
}

/// The words of `query` as `index` would index them, each once, in order.
fn terms(index: &Index, field: Field, query: &str) -> tantivy::Result<Vec<String>> {
    let mut analyzer = index.tokenizer_for_field(field)?;
    let mut stream = analyzer.token_stream(query);
    let mut terms: Vec<String> = Vec::new();
    while stream.advance() {
        let token = &stream.token().text;
        if !terms.contains(token) {
            terms.push(token.clone());
        }
    }
    Ok(terms)
}
