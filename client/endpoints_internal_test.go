package client

import "testing"

func TestNormalizeEndpoints(t *testing.T) {
	t.Parallel()
	cfg := Config{Endpoints: []string{"127.0.0.1:7420", "http://127.0.0.1:7422/"}}.withDefaults()
	if err := normalizeEndpoints(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoints[0] != "http://127.0.0.1:7420" || cfg.Endpoints[1] != "http://127.0.0.1:7422" || cfg.Endpoint != "http://127.0.0.1:7420" {
		t.Errorf("normalized to %v, Endpoint %q", cfg.Endpoints, cfg.Endpoint)
	}
	single := Config{}.withDefaults()
	if err := normalizeEndpoints(&single); err != nil || len(single.Endpoints) != 1 || single.Endpoints[0] != "http://127.0.0.1:7420" {
		t.Errorf("default endpoint: %v %v", single.Endpoints, err)
	}
}
