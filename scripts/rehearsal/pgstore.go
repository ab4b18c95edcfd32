//go:build ignore

// The PostgreSQL re-drive store: a server that is not there is a clear error.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redeliver-go/redeliver/redrive/pgstore"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, "postgres://redeliver@127.0.0.1:9/redeliver?connect_timeout=2")
	if err == nil {
		s.Close()
		log.Fatal("pgstore: Open succeeded with no server")
	}
	fmt.Println("pgstore: ok:", err != nil)
}
