module github.com/redeliver-go/redeliver/host

go 1.25.2

require github.com/redeliver-go/redeliver v0.1.0

require github.com/tailscale/hujson v0.0.0-20250605163823-992244df8c5a // indirect
