module github.com/redeliver-go/redeliver

go 1.25.0
