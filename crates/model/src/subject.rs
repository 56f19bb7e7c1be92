//! What a finding is about beyond its kind, typed: where (a server's
//! address, or the client that asked a resolver) and what there (a
//! statement's fingerprint, a name, the resolver asked). In JSON it is one
//! string, "127.0.0.1:5432 SELECT … WHERE id = $1", as it always was.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Where a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    Server(SocketAddr),
    /// A client by its address alone: a stub resolver opens a socket per
    /// lookup, so its port says nothing.
    Client(IpAddr),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    pub at: Option<Place>,
    /// What there; empty for the whole place.
    pub what: String,
}

impl Subject {
    pub fn server(at: SocketAddr) -> Self {
        Subject {
            at: Some(Place::Server(at)),
            what: String::new(),
        }
    }

    /// `what` on the server `at`: a statement's fingerprint, a call's shape.
    pub fn on_server(at: SocketAddr, what: impl Into<String>) -> Self {
        Subject {
            at: Some(Place::Server(at)),
            what: what.into(),
        }
    }

    /// `what` the client at `at` asked.
    pub fn of_client(at: IpAddr, what: impl Into<String>) -> Self {
        Subject {
            at: Some(Place::Client(at)),
            what: what.into(),
        }
    }

    /// What alone, with no one place.
    pub fn what(what: impl Into<String>) -> Self {
        Subject {
            at: None,
            what: what.into(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_none() && self.what.is_empty()
    }

    /// The server it is on, if it is on one.
    pub fn server_addr(&self) -> Option<SocketAddr> {
        match self.at {
            Some(Place::Server(a)) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Server(a) => a.fmt(f),
            Place::Client(a) => a.fmt(f),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.at, self.what.is_empty()) {
            (Some(at), true) => at.fmt(f),
            (Some(at), false) => write!(f, "{at} {}", self.what),
            (None, _) => f.write_str(&self.what),
        }
    }
}

impl From<&str> for Subject {
    /// Read back as written: a first word that is an address is the place.
    fn from(s: &str) -> Self {
        let (first, rest) = s.split_once(' ').unwrap_or((s, ""));
        let at = match (first.parse::<SocketAddr>(), first.parse::<IpAddr>()) {
            (Ok(a), _) => Some(Place::Server(a)),
            (_, Ok(a)) => Some(Place::Client(a)),
            _ => None,
        };
        match at {
            Some(at) => Subject {
                at: Some(at),
                what: rest.to_string(),
            },
            None => Subject::what(s),
        }
    }
}

impl Serialize for Subject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Subject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Subject::from(s.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_reads_back_as_written() {
        let pg: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        let client: IpAddr = "10.0.0.1".parse().unwrap();
        for s in [
            Subject::server(pg),
            Subject::on_server(pg, "SELECT * FROM items WHERE id = $1"),
            Subject::of_client(client, "10.0.0.53:53"),
            Subject::of_client(client, "api.internal"),
            Subject::what("api.internal db.internal"),
            Subject::default(),
        ] {
            let text = s.to_string();
            assert_eq!(Subject::from(text.as_str()), s, "{text}");
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Subject>(&json).unwrap(), s);
        }
        assert_eq!(
            Subject::on_server(pg, "GET /a").to_string(),
            "127.0.0.1:5432 GET /a"
        );
    }
}
