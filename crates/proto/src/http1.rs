//! HTTP/1.x exchanges from a byte stream: keep-alive, pipelining,
//! Content-Length, chunked, 100-continue. Headers are parsed with httparse;
//! bodies are counted, never stored.
