module whyslow.bench/gotls

go 1.25.0
