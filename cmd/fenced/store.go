package main

import (
	"crypto/tls"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
	"github.com/spf13/cobra"
)

func storeCmd() *cobra.Command {
	var (
		cfg      store.Config
		listen   string
		logs     logFlags
		keysFile string
		authFile string
		tlsFiles server.TLSFiles
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Serve the reference fenced store",
		Long: `Serve the reference fenced store: a small durable object store that
checks fencing tokens on every write.

  PUT    /v1/objects/{name}   body = value; headers Fencing-Scope, Fencing-Token
  DELETE /v1/objects/{name}   headers Fencing-Scope, Fencing-Token
  GET    /v1/objects/{name}   value, with the Fencing-Token of its write

A stale token gets 409 (application/problem+json), a missing one 428, a
malformed one 400, and with --trusted-keys-file one without a valid
Fencing-Token-Signature 403; nothing is applied in any of these. Objects, the highest
token per scope and an audit of accepted writes (GET /v1/audit) are written
in one transaction of one embedded database.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return usage(cmd, err)
			}
			cfg.Logger = log
			if keysFile != "" {
				if cfg.Verifier, err = loadVerifier(keysFile); err != nil {
					return usage(cmd, err)
				}
			}
			if authFile != "" {
				pol, err := server.LoadPolicy(authFile)
				if err != nil {
					return usage(cmd, err)
				}
				cfg.Authorize = storeAuthorize(pol)
			}
			if err := tlsFiles.Validate(); err != nil {
				return usage(cmd, err)
			}
			var tlsConf *server.TLSReloader
			if tlsFiles.Enabled() {
				if tlsConf, err = server.NewTLSReloader(tlsFiles); err != nil {
					return usage(cmd, err)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := store.Open(cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return listenErrorOf(err, "--listen", listen)
			}
			if tlsConf != nil {
				ln = tls.NewListener(ln, tlsConf.ServerConfig())
			}
			log.Info("fenced store serving", "listen", ln.Addr().String(), "data_dir", cfg.DataDir, "no_fencing", cfg.NoFencing)
			if err := s.Serve(ctx, ln); err != nil && ctx.Err() == nil {
				return err
			}
			log.Info("fenced store stopped")
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", "fenced-store-data", "directory of the store's database")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7430", "address to serve on")
	cmd.Flags().BoolVar(&cfg.NoFencing, "no-fencing", false, "accept every write, ignoring tokens (a negative control for demos and tests)")
	cmd.Flags().StringVar(&authFile, "auth-file", "", "auth policy as fenced's: writes need a principal with acquire on their scope")
	cmd.Flags().StringVar(&tlsFiles.CertFile, "cert-file", "", "TLS certificate (PEM); the port then speaks only TLS")
	cmd.Flags().StringVar(&tlsFiles.KeyFile, "key-file", "", "private key of --cert-file (PEM)")
	cmd.Flags().StringVar(&tlsFiles.TrustedCAFile, "trusted-ca-file", "", "CA certificates (PEM) that client certificates must chain to")
	cmd.Flags().BoolVar(&tlsFiles.ClientCertAuth, "client-cert-auth", false, "require a client certificate from --trusted-ca-file")
	cmd.Flags().StringVar(&keysFile, "trusted-keys-file", "", "key set (as served on fenced's /v1/keys) whose signatures writes must carry; refuses unsigned tokens")
	registerHTTPFlags(cmd.Flags(), &cfg.MaxHeaderBytes, &cfg.IdleTimeout, &cfg.BodyReadTimeout, &cfg.MaxConns)
	logs.register(cmd)
	return cmd
}
