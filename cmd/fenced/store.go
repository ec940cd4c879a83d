package main

import (
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
	"github.com/spf13/cobra"
)

// storeFlags are the flags of fenced store.
type storeFlags struct {
	cfg      store.Config
	listen   string
	logs     logFlags
	keysFile string
	authFile string
	tlsFiles server.TLSFiles
}

func storeCmd() *cobra.Command {
	var f storeFlags
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Serve the reference fenced store",
		Long: `Serve the reference fenced store: a small durable object store that
checks fencing tokens on every write.

  PUT    /v1/objects/{name}   body = value; headers Fencing-Scope, Fencing-Token
  DELETE /v1/objects/{name}   headers Fencing-Scope, Fencing-Token
  GET    /v1/objects/{name}   value, with the Fencing-Token of its write

A stale token gets 409 (application/problem+json), a missing one 428, a
malformed one 400 (tokens are canonical decimal: "007" is not 7), and with
--trusted-keys-file one without a valid Fencing-Token-Signature 403;
nothing is applied in any of these. Without --trusted-keys-file any writer
that reaches the store can present any token, 2^64-1 included, and block
its scope for good. Objects, the highest
token per scope and an audit of accepted writes (GET /v1/audit) are written
in one transaction of one embedded database.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.logs.fatal(f.cfg.Logger, f.run(cmd)) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cfg.DataDir, "data-dir", "fenced-store-data", "directory of the store's database")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7430", "address to serve on")
	fl.BoolVar(&f.cfg.NoFencing, "no-fencing", false, "accept every write, ignoring tokens (a negative control for demos and tests)")
	fl.BoolVar(&f.cfg.StrictSequences, "strict-sequences", false,
		"refuse (409 sequence-gap) a write whose Fencing-Sequence is not the last accepted under its token plus 1")
	fl.StringVar(&f.authFile, "auth-file", "", "auth policy as fenced's: writes need a principal with acquire on their scope")
	fl.StringVar(&f.tlsFiles.CertFile, "cert-file", "", "TLS certificate (PEM); the port then speaks only TLS")
	fl.StringVar(&f.tlsFiles.KeyFile, "key-file", "", "private key of --cert-file (PEM)")
	fl.StringVar(&f.tlsFiles.TrustedCAFile, "trusted-ca-file", "", "CA certificates (PEM) that client certificates must chain to")
	fl.BoolVar(&f.tlsFiles.ClientCertAuth, "client-cert-auth", false, "require a client certificate from --trusted-ca-file")
	fl.StringVar(&f.keysFile, "trusted-keys-file", "", "key set (as served on fenced's /v1/keys) whose signatures writes must carry; refuses unsigned tokens")
	fl.Int64Var(&f.cfg.MaxInFlightBytes, "max-in-flight-bytes", store.DefaultMaxInFlightBytes,
		"request body bytes PUTs may hold at once, a quarter of it per client IP; more are refused with 503 and Retry-After before their body is read")
	registerHTTPFlags(fl, &f.cfg.MaxHeaderBytes, &f.cfg.IdleTimeout, &f.cfg.BodyReadTimeout, &f.cfg.MaxConns, &f.cfg.MaxConnsPerClient)
	f.logs.register(cmd)
	return cmd
}

// config completes the store's configuration from the flags; an error is
// a usage error.
func (f *storeFlags) config() error {
	log, err := f.logs.logger(os.Stderr)
	if err != nil {
		return err
	}
	f.cfg.Logger = log
	if f.keysFile != "" {
		if f.cfg.Verifier, err = loadVerifier(f.keysFile); err != nil {
			return err
		}
	}
	if f.authFile != "" {
		pol, err := server.LoadPolicy(f.authFile)
		if err != nil {
			return err
		}
		f.cfg.Authorize = storeAuthorize(pol)
	}
	if err := f.tlsFiles.Validate(); err != nil || !f.tlsFiles.Enabled() {
		return err
	}
	r, err := server.NewTLSReloader(f.tlsFiles)
	if err != nil {
		return err
	}
	f.cfg.TLS = r.ServerConfig()
	return nil
}

// run serves the store until interrupted.
func (f *storeFlags) run(cmd *cobra.Command) error {
	if err := f.config(); err != nil {
		return usage(cmd, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := store.Open(f.cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return listenErrorOf(err, "--listen", f.listen)
	}
	log := f.cfg.Logger
	log.Info("fenced store serving", "listen", ln.Addr().String(), "data_dir", f.cfg.DataDir, "no_fencing", f.cfg.NoFencing, "strict_sequences", f.cfg.StrictSequences)
	if err := s.Serve(ctx, ln); err != nil && ctx.Err() == nil {
		return err
	}
	log.Info("fenced store stopped")
	return nil
}
