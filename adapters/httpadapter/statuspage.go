package httpadapter

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// StatusPage returns a handler serving a live status page of k. It is in
// the tradition of net/http/pprof, gRPC's channelz and OpenCensus' zpages.
// It shows every operation with its effective policy. For each it shows
// the breaker's state and the time until it half-opens. It shows the
// window's usage and time to reset, the queues, the calls in flight and
// the rejections by reason, and the p50 and p99. It also shows the
// kernel's stragglers. The page is plain server-rendered HTML: html/template
// escapes everything, and there is no script and no external asset. It
// reloads itself every refresh (2 s when refresh <= 0).
//
// It is off unless mounted. It shows the service's configuration and load,
// so mount it where only operators reach it, as one would pprof. That is
// an admin listener, or behind the application's authentication
// middleware:
//
//	e.GET("/debug/sundial", httpadapter.StatusPage(k, 0))
func StatusPage(k *kernel.Kernel, refresh time.Duration) echo.HandlerFunc {
	if refresh <= 0 {
		refresh = 2 * time.Second
	}
	secs := strconv.Itoa(max(int(refresh/time.Second), 1))
	return func(c echo.Context) error {
		st := k.Status()
		var buf bytes.Buffer
		if err := statusTemplate.Execute(&buf, statusView{Status: st, Refresh: secs, Now: time.Now().UTC().Format(time.RFC3339)}); err != nil {
			return err
		}
		h := c.Response().Header()
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		return c.HTMLBlob(http.StatusOK, buf.Bytes())
	}
}

type statusView struct {
	kernel.Status
	Refresh, Now string
}

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "0"
		case d < time.Millisecond:
			return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
		case d < time.Second:
			return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
		}
		return d.Round(100 * time.Millisecond).String()
	},
	"used": func(q pipeline.Quota) int { return q.Limit - q.Remaining },
	"pct":  func(p float64) float64 { return 100 * p },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>Sundial status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-top:1em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}
.open{background:#fdd;font-weight:bold}.half-open{background:#ffe8b0}.closed{color:#070}
.degraded{background:#fdd}.muted{color:#888}
</style></head>
<body>
<h1>Sundial status</h1>
<p>At {{.Now}}, refreshing every {{.Refresh}} s.
Stragglers (handlers still running after their answer left): <b id="stragglers">{{.Stragglers}}</b> of at most {{.MaxStragglers}};
running: {{.Running}}.</p>
<table id="operations">
<tr><th>Operation</th><th>Policy</th><th>Breaker</th><th>Window</th><th>Queues</th><th>In flight / limit</th><th>Rejected</th><th>Answers (last 30–60 s)</th></tr>
{{range .Operations}}<tr id="op-{{.ID}}">
<td><b>{{.ID}}</b></td>
<td>{{with .Policy}}{{if .PermitLimit}}{{.PermitLimit}} per {{dur .Window}}{{if .QueueLimit}}, queue {{.QueueLimit}}{{end}}<br>{{end}}{{if .ConcurrencyLimit}}{{if lt .ConcurrencyLimit 0}}adaptive concurrency{{else}}{{.ConcurrencyLimit}} at once{{end}}{{if .ConcurrencyQueueLimit}}, queue {{.ConcurrencyQueueLimit}}{{end}}<br>{{end}}{{if .FailureThreshold}}breaker after {{.FailureThreshold}} failures, {{dur .BreakDuration}}<br>{{end}}{{if .Timeout}}timeout {{dur .Timeout}}<br>{{end}}{{if .LeasePermits}}lease {{.LeasePermits}}<br>{{end}}{{if .Shadow}}shadow mode<br>{{end}}{{end}}scope {{.Scope}}{{if .Degraded}} <span class="degraded">degraded</span>{{end}}</td>
<td class="breaker {{.Breaker}}">{{.Breaker}}{{if .BreakerOpenFor}}<br>half-opens in {{dur .BreakerOpenFor}}{{end}}</td>
<td>{{if .HasWindow}}{{used .Window}} of {{.Window.Limit}} used<br>resets in {{dur .Window.Reset}}{{else}}<span class="muted">–</span>{{end}}</td>
<td>rate {{.RateQueue}}<br>concurrency {{.ConcurrencyQueue}}</td>
<td class="limit">{{.InFlight}}{{if .ConcurrencyLimit}} of {{.ConcurrencyLimit}}{{end}}{{if .AdaptiveLimit}}<br>adaptive {{.AdaptiveLimit}}{{if .Policy.Adaptive.Shadow}} (shadow){{end}}{{end}}{{if or .Streams .MaxStreams}}<br>open streams {{.Streams}}{{if .MaxStreams}} of {{.MaxStreams}}{{end}}{{end}}</td>
<td>rate {{.Rejections.Rate}}<br>concurrency {{.Rejections.Concurrency}}<br>shed {{.Rejections.Shed}}<br>breaker {{.Rejections.Breaker}}{{if .Policy.Shadow}}<br><span class="shadow">shadow, would have: rate {{.Shadowed.Rate}}, concurrency {{.Shadowed.Concurrency}}, breaker {{.Shadowed.Breaker}}, shed {{.Shadowed.Shed}}</span>{{end}}</td>
<td>{{if .Calls}}{{.Calls}} calls<br>p50 {{dur .P50}}<br>p99 {{dur .P99}}{{else}}<span class="muted">none</span>{{end}}</td>
</tr>
{{end}}</table>
{{if .Dependencies}}<table id="dependencies">
<tr><th>Dependency</th><th>Attempts</th><th>Breaker</th><th>Throttle (window)</th></tr>
{{range $name, $d := .Dependencies}}<tr id="dep-{{$name}}">
<td><b>{{$name}}</b></td>
<td>{{$d.Attempts}}: {{$d.Retries}} retries, {{$d.Hedges}} hedges<br>budget refused {{$d.BudgetRefusals}}</td>
<td>{{if $d.HasBreaker}}{{$d.Breaker}}{{else}}<span class="muted">none</span>{{end}}</td>
<td class="throttle">{{if $d.HasThrottle}}requests {{$d.WindowRequests}}, accepts {{$d.WindowAccepts}}, rejection {{printf "%.1f" (pct $d.Rejection)}} %<br>refused {{$d.Throttled}}{{else}}<span class="muted">off</span>{{end}}</td>
</tr>
{{end}}</table>{{end}}
</body></html>
`))
