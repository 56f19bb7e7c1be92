use serde::{Deserialize, Serialize};

/// The SQL an inbound request kind sent, like an APM's per-request query
/// summary but read from the wire: the median and the slowest request of
/// the kind, and the statement shapes that cost the most.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlSummary {
    /// The service, "127.0.0.1:8080".
    pub server: String,
    /// The request kind, as exchanges name it ("GET /checkout").
    pub request: String,
    /// Requests of this kind that sent SQL or looked a name up.
    pub requests: u32,
    /// The request of median duration.
    pub median: SqlRequest,
    /// The slowest request.
    pub worst: SqlRequest,
    /// Shapes by statements per request, most first.
    pub top_by_count: Vec<SqlShape>,
    /// Shapes by database time per request, most first.
    pub top_by_time: Vec<SqlShape>,
}

/// The statements one inbound request sent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SqlRequest {
    /// The inbound exchange.
    pub exchange: u32,
    pub total_us: u64,
    pub statements: StatementCounts,
    /// Distinct normalized statements.
    pub shapes: u32,
    /// Statements that repeated an earlier one of the request, parameters included.
    pub duplicates: u32,
    /// Every statement's time, summed (statements on several connections can overlap).
    pub db_us: u64,
    /// Time the request had at least one statement in flight: the database's
    /// part of its critical path.
    pub db_critical_us: u64,
    /// The DNS queries its lookups sent (absent: none).
    #[serde(default, skip_serializing_if = "DnsCounts::is_empty")]
    pub dns: DnsCounts,
}

/// The DNS queries one request's lookups sent, and their time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DnsCounts {
    pub queries: u32,
    /// Answered NXDOMAIN: a search-list name that does not exist, mostly.
    pub nxdomain: u32,
    /// Never answered (a lost query the client asked again after its timeout).
    pub unanswered: u32,
    /// Every query's time, summed (A and AAAA go out together).
    pub dns_us: u64,
    /// Time the request had at least one query in flight.
    pub dns_critical_us: u64,
}

impl DnsCounts {
    pub fn is_empty(&self) -> bool {
        self.queries == 0
    }
}

/// Statements by kind, from their first keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatementCounts {
    pub select: u32,
    pub insert: u32,
    pub update: u32,
    pub delete: u32,
    pub other: u32,
    pub total: u32,
}

/// One normalized statement across the requests of a kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlShape {
    pub statement: String,
    pub per_request: f64,
    /// Mean time per request, summed over its statements.
    pub time_us_per_request: u64,
}
