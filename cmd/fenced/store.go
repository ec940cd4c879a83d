package main

import "github.com/spf13/cobra"

func storeCmd() *cobra.Command {
	return &cobra.Command{Use: "store", Short: "Serve the reference fenced store"}
}
