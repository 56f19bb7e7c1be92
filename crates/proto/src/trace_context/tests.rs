use super::*;

const VALID: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[test]
fn reads_the_w3c_example_and_every_flag_byte() {
    let c = traceparent(VALID.as_bytes()).unwrap();
    assert_eq!(c.trace_id, TraceId(0x0af7651916cd43dd8448eb211c80319c));
    assert!(c.sampled);
    // OpenTelemetry Python sets the random bit: 03 is sampled too.
    let otel = VALID.replace("-01", "-03");
    assert!(traceparent(otel.as_bytes()).unwrap().sampled);
    let unsampled = VALID.replace("-01", "-00");
    assert!(!traceparent(unsampled.as_bytes()).unwrap().sampled);
    assert!(traceparent(format!("  {VALID}\t").as_bytes()).is_ok());
}

#[test]
fn later_versions_may_carry_more_fields() {
    let v1 = VALID.replacen("00", "01", 1);
    assert!(traceparent(v1.as_bytes()).is_ok());
    assert!(traceparent(format!("{v1}-whatever").as_bytes()).is_ok());
    assert!(traceparent(format!("{v1}x").as_bytes()).is_err());
    assert!(
        traceparent(format!("{VALID}-more").as_bytes()).is_err(),
        "version 00 is exactly 55 characters"
    );
}

#[test]
fn refuses_what_the_spec_refuses() {
    let bad = [
        VALID.replacen("00", "ff", 1),
        VALID.replace("0af7651916cd43dd8448eb211c80319c", &"0".repeat(32)),
        VALID.replace("b7ad6b7169203331", &"0".repeat(16)),
        VALID.to_uppercase(),
        VALID.replace('-', "_"),
        VALID[..54].to_string(),
        String::new(),
        "00-xyz".to_string(),
        format!("{}é", &VALID[..54]),
    ];
    for b in bad {
        assert!(traceparent(b.as_bytes()).is_err(), "{b:?}");
    }
}

#[test]
fn finds_sqlcommenter_comments_and_gives_back_the_statement() {
    // As opentelemetry-instrumentation-psycopg2 writes it.
    let sql = format!(
        "SELECT * FROM t WHERE id = 1 /*db_driver='psycopg2%3A2.9.9',\
         dbapi_level='2.0',traceparent='{}'*/",
        VALID.replace("-01", "-03")
    );
    let (rest, c) = split_sql_comment(&sql);
    assert_eq!(rest, "SELECT * FROM t WHERE id = 1");
    let c = c.unwrap();
    assert_eq!(
        c.trace.unwrap().trace_id,
        TraceId(0x0af7651916cd43dd8448eb211c80319c)
    );
    // In front, URL-encoded dashes, a quote escaped in another value.
    let front = format!(
        "/*action='it\\'s, here',traceparent='{}'*/ UPDATE t SET a = 2",
        VALID.replace('-', "%2D")
    );
    let (rest, c) = split_sql_comment(&front);
    assert_eq!(rest, " UPDATE t SET a = 2");
    assert!(c.unwrap().trace.is_ok());
}

#[test]
fn comments_that_only_look_like_sqlcommenter_carry_no_trace() {
    let plain = "SELECT 1";
    assert!(matches!(
        split_sql_comment(plain).0,
        std::borrow::Cow::Borrowed(_)
    ));
    for sql in [
        "SELECT 'traceparent=00-…' FROM t",
        "SELECT 1 /* notraceparent='x' */",
        "SELECT 1 /* traceparent= */",
        "SELECT 1 /* traceparent='00-abc */",
        "SELECT 1 -- traceparent='00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'",
    ] {
        let found = sql_comment(sql).and_then(|c| c.trace.ok());
        assert_eq!(found, None, "{sql}");
    }
    let unquoted = format!("SELECT 1 /*traceparent={VALID}*/");
    let c = sql_comment(&unquoted).unwrap();
    assert!(c.trace.is_err(), "an unquoted value is not sqlcommenter");
    let (rest, _) = split_sql_comment(&unquoted);
    assert_eq!(rest, "SELECT 1", "the comment is still cut from the shape");
}

#[test]
fn hostile_comments_stay_bounded() {
    let huge = format!("SELECT 1 /*traceparent='{}'*/", "%41".repeat(100_000));
    assert!(sql_comment(&huge).unwrap().trace.is_err());
    let nested = format!("SELECT 1 /* /* traceparent='{VALID}' */ */");
    // PostgreSQL nests comments: the inner one is still a comment.
    assert!(sql_comment(&nested).unwrap().trace.is_ok());
    let many = "/*".repeat(10_000) + "traceparent='" + VALID + "'";
    assert!(sql_comment(&many).is_none(), "never closed");
}

#[test]
fn fuzz_entry_holds_on_mutated_seeds() {
    let seeds = [
        VALID.to_string(),
        format!("SELECT 1 /*a='b',traceparent='{VALID}'*/"),
        format!("/*traceparent='{VALID}'*/ SELECT 1 /*x*/"),
    ];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for seed in seeds {
        for _ in 0..2_000 {
            let mut b = seed.clone().into_bytes();
            for _ in 0..3 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let at = (x >> 33) as usize % b.len();
                match x % 3 {
                    0 => b[at] = (x >> 20) as u8,
                    1 => b.truncate(at),
                    _ => b.insert(at, b"-'*/,="[(x >> 40) as usize % 6]),
                }
                if b.is_empty() {
                    break;
                }
            }
            fuzz(&b);
        }
    }
}
