//! A call whose span's nearest server ancestor is a request of the
//! service (`Exchange::span_parent`, as a trace source read it): the
//! source's own word, kept.

use crate::attribution::table::{Decision, Table};
use whyslow_model::{Attribution, Exchange, ExchangeRole, Rule};

pub fn place(exchanges: &[Exchange], table: &mut Table) {
    for (i, e) in exchanges.iter().enumerate() {
        if let (ExchangeRole::Outbound, Some(parent)) = (e.role, e.span_parent) {
            let d = Decision::Given(parent, Attribution::Span, Rule::SpanParent);
            table.decide(i, d);
        }
    }
}
