//! curl's `-w/--write-out` for probe results: the same variable names and
//! units (seconds, cumulative from the start of the request).

use whyslow_model::RequestPhases;

fn secs(us: u64) -> String {
    format!("{:.6}", us as f64 / 1e6)
}

/// The cumulative curl timings for one request, in µs.
struct Cumulative {
    namelookup: u64,
    connect: u64,
    appconnect: u64,
    pretransfer: u64,
    posttransfer: u64,
    starttransfer: u64,
    total: u64,
}

fn cumulative(r: &RequestPhases) -> Cumulative {
    let namelookup = r.dns_us;
    let connect = namelookup + r.connect_us;
    // curl reports 0 for time_appconnect when there was no TLS handshake.
    let appconnect = if r.tls_us > 0 { connect + r.tls_us } else { 0 };
    let pretransfer = connect + r.tls_us;
    let posttransfer = pretransfer + r.send_us;
    Cumulative {
        namelookup,
        connect,
        appconnect,
        pretransfer,
        posttransfer,
        starttransfer: posttransfer + r.wait_us,
        total: r.total_us,
    }
}

/// The value of one variable, or None when curl has no such variable here.
pub fn variable(r: &RequestPhases, name: &str) -> Option<String> {
    let c = cumulative(r);
    let ip = r.remote.map(|a| a.ip().to_string()).unwrap_or_default();
    Some(match name {
        "time_namelookup" => secs(c.namelookup),
        "time_connect" => secs(c.connect),
        "time_appconnect" => secs(c.appconnect),
        "time_pretransfer" => secs(c.pretransfer),
        "time_posttransfer" => secs(c.posttransfer),
        "time_starttransfer" => secs(c.starttransfer),
        "time_total" => secs(c.total),
        "time_redirect" => secs(0),
        "http_code" | "response_code" => format!("{:03}", r.status),
        "size_download" => r.response_body_bytes.to_string(),
        "size_header" => r.response_header_bytes.to_string(),
        "size_request" | "size_upload" => r.request_bytes.to_string(),
        "num_connects" => u8::from(!r.reused).to_string(),
        "conn_id" => r.connection.to_string(),
        "remote_ip" => ip,
        "remote_port" => r.remote.map(|a| a.port().to_string()).unwrap_or_default(),
        "local_ip" => r.local.map(|a| a.ip().to_string()).unwrap_or_default(),
        "local_port" => r.local.map(|a| a.port().to_string()).unwrap_or_default(),
        "http_version" => r.http_version.clone(),
        "scheme" => if r.tls.is_some() { "https" } else { "http" }.to_string(),
        "speed_download" => {
            let s = r.total_us.max(1) as f64 / 1e6;
            format!("{:.0}", r.response_body_bytes as f64 / s)
        }
        _ => return None,
    })
}

const JSON_VARS: &[&str] = &[
    "time_namelookup",
    "time_connect",
    "time_appconnect",
    "time_pretransfer",
    "time_posttransfer",
    "time_starttransfer",
    "time_total",
    "http_code",
    "size_download",
    "size_header",
    "size_request",
    "num_connects",
    "conn_id",
    "remote_ip",
    "remote_port",
    "local_ip",
    "local_port",
    "http_version",
];

fn json_object(r: &RequestPhases) -> String {
    let mut map = serde_json::Map::new();
    for name in JSON_VARS {
        let v = variable(r, name).unwrap_or_default();
        let value = match v.parse::<f64>() {
            Ok(n) if !name.ends_with("_ip") && *name != "http_version" => serde_json::json!(n),
            _ => serde_json::Value::String(v),
        };
        map.insert((*name).to_string(), value);
    }
    serde_json::Value::Object(map).to_string()
}

/// Expands a curl write-out format: `%{var}`, `%{json}`, `%%`, `\n`, `\t`, `\r`.
/// Unknown variables expand to nothing, as in curl (which also warns).
pub fn expand(format: &str, r: &RequestPhases) -> String {
    let mut out = String::new();
    let mut rest = format;
    while let Some(i) = rest.find(['%', '\\']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("%{") {
            if let Some(end) = after.find('}') {
                let name = &after[..end];
                match name {
                    "json" => out.push_str(&json_object(r)),
                    _ => out.push_str(&variable(r, name).unwrap_or_default()),
                }
                rest = &after[end + 1..];
                continue;
            }
        }
        let (text, skip) = match tail.as_bytes().get(..2) {
            Some(b"%%") => ("%", 2),
            Some(b"\\n") => ("\n", 2),
            Some(b"\\t") => ("\t", 2),
            Some(b"\\r") => ("\r", 2),
            _ => (&tail[..1], 1),
        };
        out.push_str(text);
        rest = &tail[skip..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RequestPhases {
        RequestPhases {
            index: 0,
            connection: 0,
            reused: false,
            dns_us: 1000,
            connect_us: 2000,
            tls_us: 3000,
            send_us: 100,
            wait_us: 40_000,
            receive_us: 900,
            total_us: 47_050,
            status: 200,
            http_version: "1.1".into(),
            remote: Some("127.0.0.1:8080".parse().unwrap()),
            local: None,
            request_bytes: 10,
            response_header_bytes: 20,
            response_body_bytes: 30,
            content_encoding: None,
            tls: None,
        }
    }

    #[test]
    fn curl_timings_are_cumulative_seconds() {
        let r = sample();
        let out = expand(
            "%{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total}",
            &r,
        );
        assert_eq!(out, "0.003000 0.006000 0.046100 0.047050");
    }

    #[test]
    fn escapes_percent_and_unknown_variables() {
        let r = sample();
        assert_eq!(
            expand("%{http_code}%%\\n%{nope}|%{remote_port}", &r),
            "200%\n|8080"
        );
        assert_eq!(expand("100% %{", &r), "100% %{");
    }

    #[test]
    fn json_holds_numbers_and_strings() {
        let v: serde_json::Value = serde_json::from_str(&expand("%{json}", &sample())).unwrap();
        assert_eq!(v["http_code"], 200.0);
        assert_eq!(v["remote_ip"], "127.0.0.1");
        assert_eq!(v["num_connects"], 1.0);
    }
}
