package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartW, chartH        = 760, 300
	padL, padR            = 72, 16
	padT, padB            = 44, 48
	plotW, plotH          = chartW - padL - padR, chartH - padT - padB
	barLabelW, barRowH    = 200, 22
	barCountW             = 130
	barChartW             = chartW
	barPlotW              = barChartW - barLabelW - barCountW - padR
	barChartTop, barChart = 36, 12
)

// Colors of the series, chosen to stay apart for the common kinds of
// color blindness (Okabe and Ito's palette).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// axis is one axis of a chart, in data units; label names the unit.
type axis struct {
	lo, hi float64
	label  string
}

// series is a line of a chart.
type series struct {
	name, color string
	pts         []Point
	// step draws it as a staircase (a CDF), dash as a dashed line.
	step, dash bool
}

// band is a shaded area between two lines sampled at the same x.
type band struct {
	name, color string
	lo, hi      []Point
}

// lineChart is a chart of lines and bands over two linear axes.
type lineChart struct {
	id, title string
	x, y      axis
	series    []series
	bands     []band
	// empty is said in place of the chart when it has nothing to draw.
	empty string
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// svgOpen starts an SVG element with its id, its accessible title and
// its visible one.
func svgOpen(b *strings.Builder, id, title string, w, h int) {
	fmt.Fprintf(b, `<svg id="%s" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-labelledby="%s-title">`,
		esc(id), w, h, w, h, esc(id))
	fmt.Fprintf(b, `<title id="%s-title">%s</title>`, esc(id), esc(title))
	fmt.Fprintf(b, `<text x="%d" y="20" class="ctitle">%s</text>`, padL, esc(title))
}

// emptyChart is a chart's frame saying why it has nothing to draw.
func emptyChart(id, title, why string) template.HTML {
	var b strings.Builder
	svgOpen(&b, id, title, chartW, 80)
	fmt.Fprintf(&b, `<text x="%d" y="52" class="note">%s</text></svg>`, padL, esc(why))
	return template.HTML(b.String())
}

func (c *lineChart) px(x float64) float64 {
	return padL + (x-c.x.lo)/(c.x.hi-c.x.lo)*plotW
}

func (c *lineChart) py(y float64) float64 {
	return padT + plotH - (y-c.y.lo)/(c.y.hi-c.y.lo)*plotH
}

// render draws the chart. The axes are widened to round ticks first.
func (c *lineChart) render() template.HTML {
	if c.empty != "" {
		return emptyChart(c.id, c.title, c.empty)
	}
	xStep, xt := ticks(c.x.lo, c.x.hi, 8)
	yStep, yt := ticks(c.y.lo, c.y.hi, 5)
	c.x.lo, c.x.hi = xt[0], xt[len(xt)-1]
	c.y.lo, c.y.hi = yt[0], yt[len(yt)-1]
	var b strings.Builder
	svgOpen(&b, c.id, c.title, chartW, chartH)
	c.grid(&b, xt, xStep, yt, yStep)
	for i, bd := range c.bands {
		if len(bd.lo) == 0 {
			continue
		}
		var d strings.Builder
		for j, p := range bd.hi {
			fmt.Fprintf(&d, "%s%.1f,%.1f ", pick(j == 0, "M", "L"), c.px(p.X), c.py(p.Y))
		}
		for j := len(bd.lo) - 1; j >= 0; j-- {
			fmt.Fprintf(&d, "L%.1f,%.1f ", c.px(bd.lo[j].X), c.py(bd.lo[j].Y))
		}
		fmt.Fprintf(&b, `<path class="band" d="%sZ" fill="%s" fill-opacity="0.18" stroke="none"><title>%s</title></path>`,
			d.String(), colorOf(bd.color, i), esc(bd.name))
	}
	for i, s := range c.series {
		if len(s.pts) == 0 {
			continue
		}
		var d strings.Builder
		for j, p := range s.pts {
			if s.step && j > 0 {
				fmt.Fprintf(&d, "H%.1f ", c.px(p.X))
			}
			fmt.Fprintf(&d, "%s%.1f,%.1f ", pick(j == 0, "M", "L"), c.px(p.X), c.py(p.Y))
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<path class="line" d="%s" fill="none" stroke="%s" stroke-width="1.8"%s><title>%s</title></path>`,
			strings.TrimSpace(d.String()), colorOf(s.color, i), dash, esc(s.name))
	}
	c.legend(&b)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// grid draws the frame, grid lines, tick labels and axis labels.
func (c *lineChart) grid(b *strings.Builder, xt []float64, xStep float64, yt []float64, yStep float64) {
	for _, v := range yt {
		y := c.py(v)
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, padL, y, padL+plotW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`, padL-6, y+4, esc(tickLabel(v, yStep)))
	}
	for _, v := range xt {
		x := c.px(v)
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" class="tick" text-anchor="middle">%s</text>`, x, padT+plotH+16, esc(tickLabel(v, xStep)))
	}
	fmt.Fprintf(b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d" fill="none"/>`, padL, padT, plotW, plotH)
	fmt.Fprintf(b, `<text x="%d" y="%d" class="alabel" text-anchor="middle">%s</text>`, padL+plotW/2, chartH-8, esc(c.x.label))
	fmt.Fprintf(b, `<text class="alabel" text-anchor="middle" transform="translate(16 %d) rotate(-90)">%s</text>`, padT+plotH/2, esc(c.y.label))
}

// legend names the series and bands above the plot, right-aligned.
func (c *lineChart) legend(b *strings.Builder) {
	type entry struct {
		name, color string
		band, dash  bool
	}
	var es []entry
	for i, s := range c.series {
		es = append(es, entry{s.name, colorOf(s.color, i), false, s.dash})
	}
	for i, bd := range c.bands {
		es = append(es, entry{bd.name, colorOf(bd.color, i), true, false})
	}
	if len(es) < 2 {
		return
	}
	x := float64(padL + plotW)
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		w := 28 + 6.5*float64(len([]rune(e.name)))
		x -= w
		if e.band {
			fmt.Fprintf(b, `<rect x="%.1f" y="29" width="20" height="10" fill="%s" fill-opacity="0.25"/>`, x, e.color)
		} else {
			dash := ""
			if e.dash {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="34" x2="%.1f" y2="34" stroke="%s" stroke-width="2"%s/>`, x, x+20, e.color, dash)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="38" class="legend">%s</text>`, x+24, esc(e.name))
	}
}

// stackedBars is a histogram whose bars stack one count per category.
type stackedBars struct {
	id, title string
	hist      *Histogram
	xLabel    string
	colors    []string
	empty     string
}

func (s *stackedBars) render() template.HTML {
	h := s.hist
	if s.empty != "" || h == nil || h.Bins() == 0 {
		return emptyChart(s.id, s.title, s.empty)
	}
	bins := h.Bins()
	top := 0
	for bin := range bins {
		sum := 0
		for c := range h.Counts {
			sum += h.Counts[c][bin]
		}
		top = max(top, sum)
	}
	c := &lineChart{id: s.id, title: s.title, x: axis{0, float64(bins) * h.Width, s.xLabel}, y: axis{0, float64(top), "answers"}}
	xStep, xt := ticks(c.x.lo, c.x.hi, 8)
	yStep, yt := ticks(c.y.lo, c.y.hi, 5)
	c.x.lo, c.x.hi = xt[0], xt[len(xt)-1]
	c.y.lo, c.y.hi = yt[0], yt[len(yt)-1]
	var b strings.Builder
	svgOpen(&b, s.id, s.title, chartW, chartH)
	c.grid(&b, xt, xStep, yt, yStep)
	for bin := range bins {
		x0, x1 := c.px(float64(bin)*h.Width), c.px(float64(bin+1)*h.Width)
		base := 0
		for cat := range h.Counts {
			n := h.Counts[cat][bin]
			if n == 0 {
				continue
			}
			y0, y1 := c.py(float64(base)), c.py(float64(base+n))
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s to %s tokens: %d</title></rect>`,
				x0+0.5, y1, math.Max(x1-x0-1, 0.5), y0-y1, s.colors[cat], esc(h.Categories[cat]),
				tickLabel(float64(bin)*h.Width, h.Width), tickLabel(float64(bin+1)*h.Width, h.Width), n)
			base += n
		}
	}
	for cat, name := range h.Categories {
		c.series = append(c.series, series{name: name, color: s.colors[cat]})
	}
	c.barLegend(&b)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// barLegend names the categories of bars, each by a filled square.
func (c *lineChart) barLegend(b *strings.Builder) {
	x := float64(padL + plotW)
	for i := len(c.series) - 1; i >= 0; i-- {
		s := c.series[i]
		x -= 22 + 6.5*float64(len([]rune(s.name)))
		fmt.Fprintf(b, `<rect x="%.1f" y="28" width="12" height="12" fill="%s"/><text x="%.1f" y="38" class="legend">%s</text>`,
			x, s.color, x+16, esc(s.name))
	}
}

// hbar is one bar of a horizontal bar chart.
type hbar struct {
	label string
	value int
}

// hbars draws bars side by side, each labelled with its count and its
// share of total.
func hbars(id, title string, bars []hbar, total int) template.HTML {
	if len(bars) == 0 || total == 0 {
		return emptyChart(id, title, "no answers")
	}
	top := 0
	for _, br := range bars {
		top = max(top, br.value)
	}
	h := barChartTop + len(bars)*barRowH + barChart
	var b strings.Builder
	svgOpen(&b, id, title, barChartW, h)
	for i, br := range bars {
		y := barChartTop + i*barRowH
		w := float64(br.value) / float64(top) * barPlotW
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick" text-anchor="end">%s</text>`, barLabelW-8, y+15, esc(clip(br.label, 30)))
		fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %d</title></rect>`,
			barLabelW, y+3, math.Max(w, 1), barRowH-6, palette[0], esc(br.label), br.value)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="tick">%s (%.1f%%)</text>`, float64(barLabelW)+math.Max(w, 1)+6, y+15,
			thousands(br.value), 100*float64(br.value)/float64(total))
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// tickLabel writes v with as many decimals as step needs; with a step
// of a thousand or more, in k (or M), so that one axis reads alike.
func tickLabel(v, step float64) string {
	switch {
	case step >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', decimals(step/1e6), 64) + pick(v == 0, "", "M")
	case step >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', decimals(step/1e3), 64) + pick(v == 0, "", "k")
	}
	return strconv.FormatFloat(v, 'f', decimals(step), 64)
}

// decimals is how many decimals show a multiple of step.
func decimals(step float64) int {
	if step >= 1 || step <= 0 {
		return 0
	}
	return min(int(math.Ceil(-math.Log10(step)-1e-9)), 6)
}

func colorOf(c string, i int) string {
	if c != "" {
		return c
	}
	return palette[i%len(palette)]
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
