package sonde_test

import (
	"log"
	"time"

	sonde "github.com/sonde-agent/sonde/sdk/go"
)

func Example() {
	client, err := sonde.New(sonde.Options{Prefix: "web"}) // address: $SONDE_ADDRESS or the agent's default
	if err != nil {
		log.Fatal(err) // a bad address or prefix
	}
	defer client.Close() // sends what is pending

	host := sonde.T("host", "web-042")
	_ = client.Counter("requests", 1, host, sonde.T("route", "/orders"))
	_ = client.Store("queue.depth", 17, host)
	_ = client.TsStore("billing.daily", 42, time.Now().Unix())
	if err := client.Timer("latency", 12.5, sonde.T("route", "bad route")); err != nil {
		log.Print(err) // sonde: invalid tag: tag value "bad route" contains ' '
	}
}

func ExampleClient_Time() {
	client, err := sonde.New(sonde.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	handle := func() {
		defer client.Time("db.query", sonde.T("db", "main"))()
		// ... the work being timed, in milliseconds ...
	}
	handle()
}
