module github.com/sonde-agent/sonde/sdk/go

go 1.22
