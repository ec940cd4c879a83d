package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/cobra"
)

// errConfigFile is a config file fenced cannot use; the message names the
// file and, where it can, the key.
var errConfigFile = errors.New("config file")

// applyConfigFile sets every flag of cmd named in the JSON object in path that the
// command line did not set: flags given on the command line override the
// file. Keys are flag names without dashes ("node-id"); values are JSON
// strings, numbers or booleans, read as the flag would read its argument
// ("500ms" for a duration, 65536 or "65536" for a number). An unknown key
// is an error, as an unknown flag is, and so is --config itself in the file.
func applyConfigFile(cmd *cobra.Command, path string) error {
	flags := cmd.Flags()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfigFile, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return fmt.Errorf("%w %s: not a JSON object of flag names and values: %w", errConfigFile, path, err)
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := flags.Lookup(name)
		if f == nil || name == "config" || name == "help" {
			return fmt.Errorf("%w %s: %q is not a flag of fenced", errConfigFile, path, name)
		}
		if f.Changed {
			continue // the command line wins
		}
		var s string
		switch v := values[name].(type) {
		case string:
			s = v
		case json.Number:
			s = v.String()
		case bool:
			s = fmt.Sprint(v)
		default:
			return fmt.Errorf("%w %s: %q: want a string, number or boolean, not %T", errConfigFile, path, name, v)
		}
		if err := flags.Set(name, s); err != nil {
			return fmt.Errorf("%w %s: %q: %w", errConfigFile, path, name, err)
		}
	}
	return nil
}

// registerConfigFlag adds --config to cmd; loadConfigFile applies it.
func registerConfigFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "config", "",
		`JSON file of flag values, {"node-id": "n1", "heartbeat-timeout": "500ms", ...}; flags on the command line override it`)
}
