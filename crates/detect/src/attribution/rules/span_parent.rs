//! A call a trace source gave its request (its span's parent) before
//! attribution ran: the source's own word, kept.

use crate::attribution::table::{Decision, Table};
use whyslow_model::{Attribution, Exchange, ExchangeRole, Rule};

pub fn place(exchanges: &[Exchange], table: &mut Table) {
    for (i, e) in exchanges.iter().enumerate() {
        if let (ExchangeRole::Outbound, Some(Attribution::Span), Some(parent)) =
            (e.role, e.attribution, e.parent)
        {
            let d = Decision::Given(parent, Attribution::Span, Rule::SpanParent);
            table.decide(i, d);
        }
    }
}
