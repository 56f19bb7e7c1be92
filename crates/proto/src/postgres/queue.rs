//! Exchanges in progress and the client messages the server still owes an
//! answer, both in wire order: the server answers strictly in order, so the
//! front of `waits` is what the next backend message is about.

use crate::digest::ParamDigest;
use crate::Span;
use std::collections::VecDeque;
use whyslow_model::{SmolStr, Status, TxState};

/// Exchanges not yet complete. libpq's pipeline mode and JDBC batches keep
/// a few hundred statements in flight at most; the bound keeps one flooding
/// client from growing memory.
pub const MAX_PENDING: usize = 1024;
/// Client messages awaiting an answer: up to four per Execute (Parse, Bind,
/// Describe, Execute) plus the Syncs.
pub const MAX_WAITS: usize = 4 * MAX_PENDING + 64;

/// One exchange being built: a simple-query statement, an Execute with the
/// Parse/Bind/Describe before it, or a function call.
#[derive(Default)]
pub struct Pending {
    pub label: Option<SmolStr>,
    /// Its statement was prepared by name before the capture: the label is
    /// made when it is done, with what its answer showed (`Learned`).
    pub before: Option<Before>,
    /// Columns of its first DataRow.
    pub columns: Option<u16>,
    /// Its command tag's first word.
    pub verb: Option<SmolStr>,
    /// None when a gap took part of the values.
    pub digest: Option<ParamDigest>,
    pub req: Span,
    pub resp: Span,
    pub status: Option<Status>,
    pub rows: Option<u64>,
    pub tx: Option<TxState>,
    /// Trace id of a sqlcommenter comment in the statement's text.
    pub trace: Option<whyslow_model::TraceId>,
    /// The client may still add messages (extended protocol, before Execute).
    pub open: bool,
    /// The server was asked to run it (Execute, Query, FunctionCall).
    pub executed: bool,
    /// Not run: the server skipped it after an earlier error.
    pub skipped: bool,
    pub has_parse: bool,
    pub has_bind: bool,
    /// Waits that still refer to it.
    pub holds: u32,
}

/// A statement prepared by name before the capture, as its Bind named it.
#[derive(Debug, Clone)]
pub struct Before {
    /// Shown printable and bounded (`shown_name`).
    pub name: SmolStr,
    pub params: Option<u16>,
}

/// What the server owes for one client message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Authentication and parameters, up to the first ReadyForQuery.
    Startup,
    /// A simple Query: statements `first..first+count`, `at` is the one the
    /// server is answering now.
    Query {
        first: u64,
        count: u32,
        at: u32,
        failed: bool,
    },
    Parse(Option<u64>),
    Bind(Option<u64>),
    Describe(Option<u64>),
    Execute(u64),
    Close,
    /// ReadyForQuery gives the transaction state of `ex`.
    Sync(Option<u64>),
    Function(u64),
}

impl Wait {
    /// The exchange this wait holds.
    fn ex(self) -> Option<u64> {
        match self {
            Wait::Parse(ex) | Wait::Bind(ex) | Wait::Describe(ex) | Wait::Sync(ex) => ex,
            Wait::Execute(ex) | Wait::Function(ex) => Some(ex),
            Wait::Startup | Wait::Query { .. } | Wait::Close => None,
        }
    }

    /// Ended by ReadyForQuery (the others by their own completion message).
    pub fn ends_at_ready(self) -> bool {
        matches!(
            self,
            Wait::Startup | Wait::Query { .. } | Wait::Sync(_) | Wait::Function(_)
        )
    }
}

#[derive(Default)]
pub struct Queue {
    pending: VecDeque<Pending>,
    /// Id of `pending[0]`; ids grow by one per exchange.
    base: u64,
    pub waits: VecDeque<Wait>,
}

impl Queue {
    /// First-byte time of the oldest request not yet answered in full.
    pub fn oldest_start(&self) -> Option<u64> {
        self.pending.iter().find_map(|p| p.req.started_at())
    }

    pub fn full(&self, more: usize) -> bool {
        self.pending.len().saturating_add(more) > MAX_PENDING || self.waits.len() >= MAX_WAITS
    }

    pub fn push(&mut self, p: Pending) -> u64 {
        self.pending.push_back(p);
        self.base + self.pending.len() as u64 - 1
    }

    pub fn get(&mut self, id: u64) -> Option<&mut Pending> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        self.pending.get_mut(i)
    }

    pub fn release(&mut self, id: u64) {
        if let Some(p) = self.get(id) {
            p.holds = p.holds.saturating_sub(1);
        }
    }

    pub fn wait(&mut self, w: Wait) {
        if let Some(p) = w.ex().and_then(|id| self.get(id)) {
            p.holds += 1;
        }
        self.waits.push_back(w);
    }

    /// Removes the front wait and lets go of its exchange.
    pub fn pop_wait(&mut self) -> Option<Wait> {
        let w = self.waits.pop_front()?;
        if let Some(id) = w.ex() {
            self.release(id);
        }
        Some(w)
    }

    /// The front exchange when nothing can change it any more (or, with
    /// `all`, whatever is at the front).
    pub fn pop_done(&mut self, all: bool) -> Option<Pending> {
        let front = self.pending.front()?;
        if !all && (front.open || front.holds > 0) {
            return None;
        }
        self.base += 1;
        self.pending.pop_front()
    }

    /// Drops every wait: nothing more will be paired with them.
    pub fn forget_waits(&mut self) {
        self.waits.clear();
        for p in &mut self.pending {
            p.holds = 0;
            p.open = false;
        }
    }
}
