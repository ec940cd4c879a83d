package main

import (
	"reflect"
	"testing"

	"github.com/fencedio/fenced/server"
	"github.com/spf13/pflag"
)

// TestFlagDefaultsAreTheServerDefaults: every flag of the node's Config
// defaults to what the server makes of the field left zero (or to zero,
// leaving the server to work it out), so that `fenced` with no flags runs
// the node server.Config documents.
func TestFlagDefaultsAreTheServerDefaults(t *testing.T) {
	t.Parallel()
	var cfg server.Config
	f := pflag.NewFlagSet("fenced", pflag.ContinueOnError)
	registerNodeFlags(f, &cfg, new(string))

	// A flag's value points at the field it sets.
	got := reflect.ValueOf(&cfg).Elem()
	field := map[uintptr]string{}
	for i := range got.NumField() {
		if sf := got.Type().Field(i); sf.IsExported() {
			field[got.Field(i).Addr().Pointer()] = sf.Name
		}
	}
	want := reflect.ValueOf(server.Config{}.WithDefaults())
	checked := 0
	f.VisitAll(func(fl *pflag.Flag) {
		name, ok := field[reflect.ValueOf(fl.Value).Pointer()]
		if !ok {
			return // not a field of Config: --initial-cluster
		}
		checked++
		if v := got.FieldByName(name); !v.IsZero() && !reflect.DeepEqual(v.Interface(), want.FieldByName(name).Interface()) {
			t.Errorf("--%s defaults to %v, the server's %s to %v", fl.Name, v.Interface(), name, want.FieldByName(name).Interface())
		}
	})
	if checked < 30 {
		t.Fatalf("checked %d flags; registerNodeFlags has more", checked)
	}
}
