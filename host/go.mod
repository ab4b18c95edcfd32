module github.com/redeliver-go/redeliver/host

go 1.26.0

require github.com/redeliver-go/redeliver v0.0.0

require github.com/tailscale/hujson v0.0.0-20260727124030-b80ff77dac4f // indirect

replace github.com/redeliver-go/redeliver => ../
