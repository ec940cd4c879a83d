package main

import (
	"github.com/fencedio/fenced/internal/buildinfo"
	"github.com/spf13/cobra"
)

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision fenced was built from",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write([]byte(buildinfo.Read().Text("fenced")))
			return err
		},
	}
}
