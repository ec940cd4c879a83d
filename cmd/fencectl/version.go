package main

import (
	"github.com/fencedio/fenced/internal/buildinfo"
	"github.com/spf13/cobra"
)

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision fencectl was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Read()
			if g.json {
				return printJSON(cmd.OutOrStdout(), info)
			}
			_, err := cmd.OutOrStdout().Write([]byte(info.Text("fencectl")))
			return err
		},
	}
}
