// Package sonde is the Go client of the sonde host telemetry agent.
//
// A Client sends metric points to the agent over a local socket in wire
// protocol 1 (msgpack, metricserver2-compatible), the same bytes as every
// other sonde SDK (see sdk/SPEC.md in the sonde repository).
//
//	client, err := sonde.New(sonde.Options{Prefix: "web"})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer client.Close()
//	client.Counter("requests", 1, sonde.T("host", "a"))
//	defer client.Time("handler", sonde.T("route", "/"))()
//
// Emitting never blocks and never touches the socket: points go into a
// bounded buffer that a background goroutine sends every 200 ms, summing
// counters and rate counters of the same series first. When the buffer is
// full, points are dropped and counted (Client.Dropped); failed sends are
// counted too (Client.SendErrors) and the connection is re-opened on the
// next send, so a restarted agent is picked up again.
//
// Names and tags are checked on every emit and rejected with an error
// wrapping ErrInvalidName, ErrInvalidTag or ErrInvalidValue; nothing is
// dropped silently. A warm client allocates nothing per point (see
// BENCHMARKS.md).
package sonde
