//! The lab's MySQL server and client, together and apart.

use super::client::Client;
use super::*;
use crate::pgmini::shop::{mysql_text, ITEMS_PER_ORDER, ORDERS};

fn packet(seq: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Out::default();
    out.packet(seq, |b| b.extend_from_slice(body));
    out.take()
}

#[tokio::test]
async fn the_client_reads_the_shop_through_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, 10));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut c = Client::connect_from(tcp, "lab", "shop").await.unwrap();
    c.query("CREATE TABLE t (id bigint)").await.unwrap();
    let orders = c
        .execute(
            &mysql_text(shop::ORDERS_OF_CUSTOMER, 0),
            &[Value::Int(shop::CUSTOMER)],
        )
        .await
        .unwrap();
    assert_eq!(orders.len() as i64, ORDERS);
    assert_eq!(orders[1], vec![Value::Int(2), Value::Int(2000)]);
    let ids: Vec<Value> = (1..=ORDERS).map(Value::Int).collect();
    let text = mysql_text(shop::ITEMS_OF_ORDERS, ids.len());
    for _ in 0..2 {
        let items = c.execute(&text, &ids).await.unwrap();
        assert_eq!(items.len() as i64, ORDERS * ITEMS_PER_ORDER);
    }
    // A text query with its values in it runs too (rows in the text protocol).
    let rate = c
        .query_rows("SELECT rate FROM tax_rates WHERE region = 'EU' /*traceparent='x'*/")
        .await
        .unwrap();
    assert_eq!(rate, vec![vec![Value::Int(shop::RATE_BP)]]);
    let items = c
        .query_rows(
            "SELECT id, product_id, quantity FROM order_items WHERE order_id IN (1, 2) ORDER BY id",
        )
        .await
        .unwrap();
    assert_eq!(items.len() as i64, 2 * ITEMS_PER_ORDER);
    let err = c.execute("DROP TABLE orders", &[]).await.unwrap_err();
    assert!(err.to_string().contains("shop's statements"), "{err}");
}

#[test]
fn hostile_packets_end_quietly() {
    fuzz(&packet(0, &[wire::COM_STMT_EXECUTE, 9, 0, 0, 0]));
    let prepare = [
        &[wire::COM_STMT_PREPARE][..],
        mysql_text(shop::PRODUCTS, 3).as_bytes(),
    ]
    .concat();
    let mut all = packet(0, &prepare);
    // Execute statement 1 with a huge string length and a truncated body.
    all.extend(packet(
        0,
        &[
            wire::COM_STMT_EXECUTE,
            1,
            0,
            0,
            0,
            0,
            1,
            0,
            0,
            0,
            0,
            1,
            0xfd,
            0,
            0xfe,
            0xff,
        ],
    ));
    all.extend(packet(
        0,
        &[wire::COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0],
    ));
    all.extend(packet(0, &[0x42]));
    fuzz(&all);
    fuzz(b"\xff\xff\xff\x00");
}
