// Measures a report page once it has loaded (tests/palm_search/test_browser.py appends this
// script to a copy of the page): each plotly figure's traces, points and height, the top
// mappings table's right edge, the page's width and each picture's width, as JSON in
// <pre id="measured"> for chromium --dump-dom.
window.addEventListener('load', () => setTimeout(() => {
  const plots = [...document.querySelectorAll('.plotly-graph-div')].map(d => ({
    id: d.closest('section') ? d.closest('section').id : '', traces: (d._fullData || []).length,
    points: (d._fullData || []).reduce((n, t) => n + ((t.x || t.dimensions || t.y || []).length || 0), 0),
    height: d.getBoundingClientRect().height}));
  const table = document.querySelector('#top-mappings table');
  const images = [...document.querySelectorAll('img')].map(i => i.naturalWidth);
  const out = document.createElement('pre'); out.id = 'measured';
  out.textContent = JSON.stringify({plots, table: table ? table.getBoundingClientRect().right : null,
    page: document.documentElement.scrollWidth, images});
  document.body.appendChild(out);
}, 500));
