package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

var (
	// ErrUnauthenticated: the server has authentication on and the
	// credentials (Config.Token, or the client certificate) are missing,
	// unknown or expired.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the credentials are valid but no rule grants
	// what the call needs on its key.
	ErrPermissionDenied = errors.New("permission denied")
)

// TLSFiles names the files of a TLS client, as etcdctl's --cacert, --cert
// and --key (and curl's --cacert, --cert, --key) do.
type TLSFiles struct {
	// CAFile holds the CA certificates (PEM) that verify the server.
	// Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key (PEM) for
	// servers that require one, or that take its identity as the
	// principal. Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the server's certificate is checked
	// against. Empty: the endpoint's host.
	ServerName string
}

// Config returns the tls.Config the files describe.
func (f TLSFiles) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", f.CAFile)
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("tls: client cert file and key file go together")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client key pair: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// credentials returns the client options that attach c's bearer token to
// every request, unary and streaming.
func (c *Config) credentials() []connect.ClientOption {
	if c.Token == "" {
		return nil
	}
	return []connect.ClientOption{connect.WithInterceptors(bearerToken("Bearer " + c.Token))}
}

// bearerToken sets the Authorization header of every call.
type bearerToken string

func (b bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Revoke ends the current lease of key whoever holds it, and returns it
// (without its ID) and the principal the server recorded as revoking it.
// It needs the admin permission on key; ErrNotHeld when key is free.
func (c *Client) Revoke(ctx context.Context, key string) (Info, string, error) {
	var resp *connect.Response[fencedv1.RevokeResponse]
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		resp, err = ep.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: key}))
		return err
	})
	if err != nil {
		return Info{}, "", fmt.Errorf("revoke %q: %w", key, fromRPC(err))
	}
	return infoFromProto(resp.Msg.GetLease()), resp.Msg.GetRevokedBy(), nil
}

// setTLS gives a default transport the TLS settings of the config.
func (c *Config) setTLS(t *http.Transport) {
	if c.TLS != nil {
		t.TLSClientConfig = c.TLS.Clone()
	}
}

// Signature returns the server's signature of the lease's token, "" unless
// the server signs tokens; fencehttp.Transport and fenceconnect's client
// interceptor send it in Fencing-Token-Signature. It follows the latest
// renewal, so a rotation of the server's key reaches guards.
func (l *Lease) Signature() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sig != "" {
		return l.sig
	}
	return l.info.Signature
}
