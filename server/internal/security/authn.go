package security

// AuthResult is what authentication found for a request: the principal,
// or the error that says why there is none.
type AuthResult struct {
	Principal Principal
	Err       error
}
