package report

import (
	"html/template"
	"time"
)

// page is the report's HTML: one file, its style inline, no script and
// nothing loaded from elsewhere, so that it opens the same from a mail,
// a shared drive or a machine without network. html/template escapes
// every value written into it.
var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"utc": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>aerie run {{.Run}}: report</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px auto; max-width: 800px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin: 0 0 12px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid #eee; }
th { width: 30%; font-weight: 600; color: #444; }
td { overflow-wrap: anywhere; }
.note { color: #8a4b00; }
.warn { background: #fff4e0; border-left: 4px solid #e69f00; padding: 6px 10px; margin: 8px 0; }
figure { margin: 16px 0 24px; }
figcaption { color: #555; font-size: 13px; margin-top: 2px; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg .ctitle { font-size: 15px; font-weight: 600; fill: #222; }
svg .tick, svg .legend { font-size: 11px; fill: #444; }
svg .alabel { font-size: 12px; fill: #444; }
svg .note { font-size: 13px; fill: #8a4b00; }
svg .grid { stroke: #e6e6e6; stroke-width: 1; }
svg .frame { stroke: #999; stroke-width: 1; }
</style>
</head>
<body>
<h1>Run {{.Run}}</h1>
<p class="sub">{{if .Done}}finished{{else if .Unknown}}finished or not: unknown{{else}}not finished{{end}}; report written {{utc .Generated}} from {{.Dir}}</p>
{{range .Notes}}<p class="warn">{{.}}</p>
{{end}}{{range .Skipped}}<div class="warn">{{.Lines}} line(s) of {{.File}} could not be read and are left out of this report:
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul></div>
{{end}}
<h2>Summary</h2>
<table id="summary">
{{range .Summary}}<tr><th>{{.Name}}</th><td>{{.Value}}</td></tr>
{{end}}</table>

<h2>Parameters</h2>
{{if .ManifestNote}}<p class="note">No run manifest: {{.ManifestNote}}.</p>{{end}}
{{if .Params}}<table id="parameters">
{{range .Params}}<tr><th>{{.Name}}</th><td>{{.Value}}</td></tr>
{{end}}</table>{{end}}

<h2>Charts</h2>
{{range .Charts}}<figure id="fig-{{.ID}}">
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}
</body>
</html>
`))
