package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed ui
var uiFiles embed.FS

// Files are the dashboard's page, its script and its style.
func Files() fs.FS {
	ui, _ := fs.Sub(uiFiles, "ui")
	return ui
}
