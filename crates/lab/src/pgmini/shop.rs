//! The shop the orm-storm checkout reads: its statements (the exact SQL the
//! app sends, which a real PostgreSQL runs too), the rows, and the SQL that
//! creates them in a real PostgreSQL.

use std::fmt::Write;

/// Orders of the customer whose checkout runs.
pub const ORDERS: i64 = 20;
/// Items per order, each of its own product.
pub const ITEMS_PER_ORDER: i64 = 3;
pub const CUSTOMER: i64 = 1;
pub const REGION: &str = "EU";
/// The tax rate in basis points.
pub const RATE_BP: i64 = 2000;

pub const ORDERS_OF_CUSTOMER: &str =
    "SELECT id, total FROM orders WHERE customer_id = $1 ORDER BY id";
pub const ITEMS_OF_ORDER: &str =
    "SELECT id, product_id, quantity FROM order_items WHERE order_id = $1 ORDER BY id";
pub const PRODUCT: &str = "SELECT id, name, price FROM products WHERE id = $1";
pub const TAX_RATE: &str = "SELECT rate FROM tax_rates WHERE region = $1";
pub const ITEMS_OF_ORDERS: &str =
    "SELECT id, product_id, quantity FROM order_items WHERE order_id = ANY($1) ORDER BY id";
pub const PRODUCTS: &str = "SELECT id, name, price FROM products WHERE id = ANY($1) ORDER BY id";

/// PostgreSQL type OIDs (pg_type.dat).
pub const INT8: u32 = 20;
pub const TEXT: u32 = 25;
pub const INT8_ARRAY: u32 = 1016;

/// One value of a row or a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Text(String),
    Ints(Vec<i64>),
}

/// What the server knows of a statement: its parameter and column types.
pub struct Statement {
    pub sql: &'static str,
    pub params: &'static [u32],
    pub columns: &'static [(&'static str, u32)],
}

const ITEM_COLUMNS: &[(&str, u32)] = &[("id", INT8), ("product_id", INT8), ("quantity", INT8)];
const PRODUCT_COLUMNS: &[(&str, u32)] = &[("id", INT8), ("name", TEXT), ("price", INT8)];

pub const STATEMENTS: &[Statement] = &[
    Statement {
        sql: ORDERS_OF_CUSTOMER,
        params: &[INT8],
        columns: &[("id", INT8), ("total", INT8)],
    },
    Statement {
        sql: ITEMS_OF_ORDER,
        params: &[INT8],
        columns: ITEM_COLUMNS,
    },
    Statement {
        sql: PRODUCT,
        params: &[INT8],
        columns: PRODUCT_COLUMNS,
    },
    Statement {
        sql: TAX_RATE,
        params: &[TEXT],
        columns: &[("rate", INT8)],
    },
    Statement {
        sql: ITEMS_OF_ORDERS,
        params: &[INT8_ARRAY],
        columns: ITEM_COLUMNS,
    },
    Statement {
        sql: PRODUCTS,
        params: &[INT8_ARRAY],
        columns: PRODUCT_COLUMNS,
    },
];

/// Items: id, order, product, quantity. Each item has its own product.
fn items() -> impl Iterator<Item = (i64, i64, i64, i64)> {
    (1..=ORDERS).flat_map(|o| {
        (0..ITEMS_PER_ORDER).map(move |k| {
            let id = (o - 1) * ITEMS_PER_ORDER + k + 1;
            (id, o, id, k + 1)
        })
    })
}

fn product(id: i64) -> Option<Vec<Value>> {
    (1..=ORDERS * ITEMS_PER_ORDER).contains(&id).then(|| {
        vec![
            Value::Int(id),
            Value::Text(format!("product-{id}")),
            Value::Int(100 * id),
        ]
    })
}

fn item_row((id, _, product, quantity): (i64, i64, i64, i64)) -> Vec<Value> {
    vec![Value::Int(id), Value::Int(product), Value::Int(quantity)]
}

/// The rows a statement returns for its parameters.
pub fn run(statement: &Statement, params: &[Value]) -> Vec<Vec<Value>> {
    let int = |i: usize| match params.get(i) {
        Some(Value::Int(v)) => *v,
        _ => 0,
    };
    let ints = || match params.first() {
        Some(Value::Ints(v)) => v.clone(),
        _ => Vec::new(),
    };
    match statement.sql {
        ORDERS_OF_CUSTOMER if int(0) == CUSTOMER => (1..=ORDERS)
            .map(|o| vec![Value::Int(o), Value::Int(1000 * o)])
            .collect(),
        ITEMS_OF_ORDER => items().filter(|i| i.1 == int(0)).map(item_row).collect(),
        ITEMS_OF_ORDERS => {
            let orders = ints();
            items()
                .filter(|i| orders.contains(&i.1))
                .map(item_row)
                .collect()
        }
        PRODUCT => product(int(0)).into_iter().collect(),
        PRODUCTS => {
            let mut ids = ints();
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter().filter_map(product).collect()
        }
        TAX_RATE if params.first() == Some(&Value::Text(REGION.into())) => {
            vec![vec![Value::Int(RATE_BP)]]
        }
        _ => Vec::new(),
    }
}

/// The schema and rows for a real PostgreSQL, as one script.
pub fn setup_sql() -> String {
    let mut s = String::from(
        "DROP TABLE IF EXISTS orders, order_items, products, tax_rates;\n\
         CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, total bigint);\n\
         CREATE TABLE order_items (id bigint PRIMARY KEY, order_id bigint, product_id bigint, quantity bigint);\n\
         CREATE TABLE products (id bigint PRIMARY KEY, name text, price bigint);\n\
         CREATE TABLE tax_rates (region text PRIMARY KEY, rate bigint);\n",
    );
    for o in 1..=ORDERS {
        let _ = writeln!(
            s,
            "INSERT INTO orders VALUES ({o}, {CUSTOMER}, {});",
            1000 * o
        );
    }
    for (id, order, product, quantity) in items() {
        let _ = writeln!(
            s,
            "INSERT INTO order_items VALUES ({id}, {order}, {product}, {quantity});"
        );
        let _ = writeln!(
            s,
            "INSERT INTO products VALUES ({product}, 'product-{product}', {});",
            100 * product
        );
    }
    let _ = writeln!(s, "INSERT INTO tax_rates VALUES ('{REGION}', {RATE_BP});");
    s
}

/// Where a statement's list parameter stands, in PostgreSQL's text.
const LIST: &str = "= ANY($1)";

/// The statement's text in MySQL's dialect: `?` for `$1`; a list parameter
/// (`= ANY($1)`) as `IN (?, ?, …)` with `list` placeholders.
pub fn mysql_text(sql: &str, list: usize) -> String {
    let marks = vec!["?"; list.max(1)].join(", ");
    sql.replace(LIST, &format!("IN ({marks})"))
        .replace("$1", "?")
}

/// The statement a MySQL text of `mysql_text` is, and its list's length
/// (0 for a statement without one).
pub fn from_mysql(text: &str) -> Option<(&'static Statement, usize)> {
    STATEMENTS
        .iter()
        .find_map(|s| match s.sql.split_once(LIST) {
            None => (mysql_text(s.sql, 0) == text).then_some((s, 0)),
            Some((head, tail)) => {
                let inner = text.strip_prefix(head)?.strip_prefix("IN (")?;
                let inner = inner.strip_suffix(tail)?.strip_suffix(')')?;
                let n = inner.split(", ").count();
                (inner.split(", ").all(|m| m == "?")).then_some((s, n))
            }
        })
}

/// The schema and rows for a real MySQL or MariaDB, one statement each.
pub fn mysql_setup() -> Vec<String> {
    let mut out = vec![
        "DROP TABLE IF EXISTS orders, order_items, products, tax_rates".to_string(),
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, total bigint)".into(),
        "CREATE TABLE order_items (id bigint PRIMARY KEY, order_id bigint, product_id bigint, quantity bigint)".into(),
        "CREATE TABLE products (id bigint PRIMARY KEY, name varchar(40), price bigint)".into(),
        "CREATE TABLE tax_rates (region varchar(8) PRIMARY KEY, rate bigint)".into(),
    ];
    out.extend(
        setup_sql()
            .lines()
            .filter(|l| l.starts_with("INSERT"))
            .map(|l| l.trim_end_matches(';').to_string()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(sql: &str) -> &'static Statement {
        STATEMENTS.iter().find(|s| s.sql == sql).unwrap()
    }

    #[test]
    fn lazy_and_batched_reads_see_the_same_rows() {
        let orders = run(statement(ORDERS_OF_CUSTOMER), &[Value::Int(CUSTOMER)]);
        assert_eq!(orders.len() as i64, ORDERS);
        let ids: Vec<i64> = (1..=ORDERS).collect();
        let lazy: Vec<Vec<Value>> = ids
            .iter()
            .flat_map(|&o| run(statement(ITEMS_OF_ORDER), &[Value::Int(o)]))
            .collect();
        let batched = run(statement(ITEMS_OF_ORDERS), &[Value::Ints(ids)]);
        assert_eq!(lazy, batched);
        assert_eq!(batched.len() as i64, ORDERS * ITEMS_PER_ORDER);
        let products = run(statement(PRODUCTS), &[Value::Ints(vec![3, 1, 3, 999])]);
        assert_eq!(products.len(), 2, "distinct, existing ids only");
        assert!(run(statement(TAX_RATE), &[Value::Text("US".into())]).is_empty());
    }

    #[test]
    fn mysql_texts_name_their_statements() {
        for s in STATEMENTS {
            let list = usize::from(s.sql.contains(LIST)) * 7;
            let text = mysql_text(s.sql, list);
            assert!(!text.contains('$'), "{text}");
            let (found, n) = from_mysql(&text).unwrap();
            assert_eq!((found.sql, n), (s.sql, list));
        }
        assert!(from_mysql("SELECT rate FROM tax_rates WHERE region = 'EU'").is_none());
        assert_eq!(
            mysql_setup().len() as i64,
            5 + ORDERS + 2 * ORDERS * ITEMS_PER_ORDER + 1
        );
    }

    #[test]
    fn the_setup_script_inserts_every_row() {
        let sql = setup_sql();
        let inserts = sql.matches("INSERT INTO").count() as i64;
        assert_eq!(inserts, ORDERS + 2 * ORDERS * ITEMS_PER_ORDER + 1);
    }
}
