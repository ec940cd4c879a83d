package quickstart

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsPayOrder keeps the README's Go snippet identical to the
// body of PayOrder, which the compiler and go vet check.
func TestReadmeShowsPayOrder(t *testing.T) {
	src, err := os.ReadFile("quickstart.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "func PayOrder(ctx context.Context, db *sql.DB) error {\n")
	body, _, ok2 := strings.Cut(body, "\n}\n")
	if !ok || !ok2 {
		t.Fatal("quickstart.go has no PayOrder")
	}
	var code strings.Builder
	for line := range strings.Lines(body + "\n") {
		code.WriteString(strings.TrimPrefix(line, "\t"))
	}
	_, section, ok := strings.Cut(string(readme), "\n## From Go\n")
	_, shown, ok2 := strings.Cut(section, "```go\n")
	shown, _, ok3 := strings.Cut(shown, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md lacks a "## From Go" section with a go block`)
	}
	if shown != code.String() {
		t.Errorf("README.md's Go snippet differs from PayOrder's body in quickstart.go; paste it again.\nREADME:\n%s\nquickstart.go:\n%s", shown, code.String())
	}
}
