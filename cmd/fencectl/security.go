package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/fencedio/fenced/client"
	"github.com/spf13/cobra"
)

// credentialFlags are the TLS and bearer token settings, named as etcdctl
// and curl name them; each defaults to an environment variable so that
// secrets need not appear in a command line (which other users of the
// machine can read in the process list).
type credentialFlags struct {
	tls   client.TLSFiles
	token string
}

func (f *credentialFlags) register(cmd *cobra.Command) {
	p := cmd.PersistentFlags()
	p.StringVar(&f.tls.CAFile, "cacert", os.Getenv("FENCED_CACERT"), "verify the server's certificate with these CA certificates (PEM; env FENCED_CACERT)")
	p.StringVar(&f.tls.CertFile, "cert", os.Getenv("FENCED_CERT"), "client certificate (PEM) for mutual TLS (env FENCED_CERT)")
	p.StringVar(&f.tls.KeyFile, "key", os.Getenv("FENCED_KEY"), "private key of --cert (PEM; env FENCED_KEY)")
	p.StringVar(&f.token, "token", "", "bearer token; prefer the env FENCED_TOKEN, which other users cannot see in the process list")
}

// apply sets cfg's TLS and token from the flags and the environment.
func (f *credentialFlags) apply(cfg *client.Config) error {
	cfg.Token = f.token
	if cfg.Token == "" {
		cfg.Token = os.Getenv("FENCED_TOKEN")
	}
	if f.tls == (client.TLSFiles{}) {
		return nil
	}
	tlsConf, err := f.tls.Config()
	if err != nil {
		return err
	}
	cfg.TLS = tlsConf
	return nil
}

// httpClient is an HTTP client with the flags' TLS settings that sends the
// bearer token on every request, for the commands that call fenced without
// client.Client (member, snapshot, status).
func (g *globals) httpClient() (*http.Client, error) {
	var cfg client.Config
	if err := g.creds.apply(&cfg); err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		t.TLSClientConfig = cfg.TLS
	}
	var rt http.RoundTripper = t
	if cfg.Token != "" {
		rt = bearerTransport{next: t, header: "Bearer " + cfg.Token}
	}
	return &http.Client{Transport: rt}, nil
}

// bearerTransport sets the Authorization header of every request.
type bearerTransport struct {
	next   http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

func revokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke KEY",
		Short: "End the current lease of a key, whoever holds it (needs admin)",
		Long: `revoke ends the current lease of KEY as if its holder had released it. The
server records the end in its log with the principal that revoked it; the
next grant of KEY carries a higher token, so writes fenced by the revoked
lease's token are refused by every guard that has seen the new one.

The holder learns of it at its next renewal, which is refused: its lease
context ends and "fencectl acquire --exec" stops its command (exit status
75). Revoking does not stop a paused holder from writing; the guards do.

It needs the admin permission on KEY when the server checks permissions
(--auth-file; see docs/security.md): give fencectl an admin's credentials
with --cert/--key or --token.

Exit status: 0 revoked (the revoked lease is printed, with the principal the
server recorded); 1 otherwise, including "lease not held" when KEY is free
and "permission denied".

Example:
  fencectl revoke jobs/7 --cert admin.pem --key admin-key.pem`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.oneShot(cmd, func(ctx context.Context, c *client.Client) error {
				info, by, err := c.Revoke(ctx, args[0])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd.OutOrStdout(), map[string]any{"revoked": toJSON(info), "revokedBy": by})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %q: owner %s, token %d (by %s)\n", info.Key, info.Owner, info.Token, by)
				return nil
			})
		},
	}
}
