// Command hello acquires a lease with the client and nothing else:
// TestLightDependencies checks what it links.
package main

import (
	"context"
	"log"

	"github.com/fencedio/fenced/client"
)

func main() {
	c, err := client.New(client.Config{Endpoints: []string{"http://127.0.0.1:7420"}})
	if err != nil {
		log.Fatal(err)
	}
	l, err := c.Acquire(context.Background(), "hello")
	if err != nil {
		log.Fatal(err)
	}
	log.Println("token", l.Token())
}
