/**
 * What a web page in the user's browser can do to the store, tried in a real headless Chromium
 * (Debian's `chromium`, driven by playwright-core), as CVE-2025-49596 did to the MCP Inspector:
 *
 * - a page on another origin sends "simple" requests a browser allows without a preflight: no
 *   Content-Type, `text/plain`, `text/plain; charset=application/json`, a form POST (the JSON in a
 *   `text/plain` form trick), and a JSON fetch that needs a preflight;
 * - a DNS-rebinding page: the browser believes `rebind.test:<store port>` is the page's own origin
 *   while its requests reach the store. Simulated with Chromium's proxy setting: a proxy (the
 *   attacker's server) serves the page itself, then forwards every other request of that origin to
 *   the store unchanged, Host header included, as a rebound DNS name would.
 *
 * Each goes at add_service (a command that would create a marker file), call_tool and /mcp. The
 * services file's bytes, the service list, the tool records and the process list stay as they
 * were, no program runs, and the store's metrics show it did receive (and refuse) every request.
 * Skipped, with a note, when /usr/bin/chromium is not installed.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer, request as httpRequest, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import type { Browser } from "playwright-core"
import { haveChromium, launchChromium, noteMissingChromium, startTestServer, together, type TestServer } from "../support/index.js"
import { describe, expect, it } from "vitest"
import { demoServer } from "../fixtures/paths.js"

noteMissingChromium("browser attack test")

/** Processes whose command line mentions `needle`, from /proc. */
const processesMentioning = (needle: string): number[] =>
  readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(needle)
      } catch {
        return false
      }
    })
    .map(Number)

/** The attacks a page runs against `target` (the store's base URL as the page sees it). */
const attackScript = (target: string, marker: string, crossOrigin: boolean): string => `
const target = ${JSON.stringify(target)};
const add = JSON.stringify({ name: "pwned", command: "sh", args: ["-c", "touch ${marker}"] });
const call = JSON.stringify({ tool_name: "demo__add", args: { a: 1, b: 2 } });
const mcpInit = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "evil", version: "1" } } });
const mcpCall = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "demo__add", arguments: { a: 1, b: 2 } } });
const targets = [["/for_store/add_service", add], ["/for_store/call_tool", call], ["/mcp", mcpInit], ["/mcp", mcpCall]];
const results = [];
async function attempt(label, path, init) {
  try {
    const r = await fetch(target + path, init);
    results.push({ label, path, type: r.type, status: r.status, body: r.type === "opaque" ? null : await r.text() });
  } catch (e) {
    results.push({ label, path, error: String(e) });
  }
}
async function formPost(path, body) {
  // The JSON-in-a-text/plain-form trick: the field name carries the JSON, the value closes it.
  const frame = document.createElement("iframe");
  frame.name = "f" + Math.random().toString(36).slice(2);
  document.body.appendChild(frame);
  const form = document.createElement("form");
  form.method = "POST"; form.enctype = "text/plain"; form.action = target + path; form.target = frame.name;
  const input = document.createElement("input");
  input.name = body.slice(0, -1) + ',"x":"'; input.value = '"}';
  form.appendChild(input); document.body.appendChild(form);
  const loaded = new Promise((resolve) => frame.addEventListener("load", resolve, { once: true }));
  form.submit();
  await Promise.race([loaded, new Promise((r) => setTimeout(r, 3000))]);
  results.push({ label: "form", path });
}
window.run = async () => {
  for (const [path, body] of targets) {
    ${
      crossOrigin
        ? `await attempt("no content type", path, { method: "POST", mode: "no-cors", body: new Blob([body]) });
    await attempt("text/plain", path, { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body });
    await attempt("text/plain; charset=application/json", path, { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain; charset=application/json" }, body });
    await attempt("json with preflight", path, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" }, body });
    await formPost(path, body);`
        : `await attempt("same origin json", path, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" }, body });
    await attempt("same origin no content type", path, { method: "POST", body: new Blob([body]) });`
    }
  }
  return results;
};
`

const page = (script: string) => `<!doctype html><html><head><meta charset="utf-8"><title>evil</title></head><body><script>${script}</script></body></html>`

/** The store's count of refused POST answers (403 and 415), from /metrics. */
const refusedPosts = async (server: TestServer): Promise<number> => {
  const text = (await server.get("/metrics")).text
  let n = 0
  for (const line of text.split("\n")) {
    const m = /^mcpstore_http_requests_total\{method="POST",status="(403|415)"\} (\d+)/.exec(line)
    if (m) n += Number(m[2])
  }
  return n
}

describe("a web page against the store, in Chromium", () => {
  it.skipIf(!haveChromium)(
    "cannot add a service, call a tool or reach /mcp from another origin or by DNS rebinding",
    async () => {
      let server: TestServer | undefined
      let browser: Browser | undefined
      let attacker: Server | undefined
      try {
        // The attacker's server: its own page, and a proxy that rebinds rebind.test to the store
        // (whose port it reads when a request comes: the store starts below, with Chromium).
        let forwarded = 0
        attacker = createServer((req, res) => {
          const url = new URL(req.url ?? "/", "http://placeholder")
          const absolute = req.url?.startsWith("http://") ?? false
          if (server === undefined) {
            res.writeHead(503).end()
            return
          }
          const storePort = server.running.port
          if (url.pathname === "/attack.html" || url.pathname === "/rebind.html") {
            const crossOrigin = url.pathname === "/attack.html"
            const target = crossOrigin ? `http://127.0.0.1:${storePort}` : `http://rebind.test:${storePort}`
            res.writeHead(200, { "content-type": "text/html" })
            res.end(page(attackScript(target, join(server.dir, "pwned-marker"), crossOrigin)))
            return
          }
          // Only the rebound origin is forwarded (Chromium's own background requests are dropped here).
          if (!absolute || url.host !== `rebind.test:${storePort}`) {
            res.writeHead(404).end()
            return
          }
          // A request of the rebound origin: to the store, headers (Host, Origin) unchanged.
          if (req.method === "POST") forwarded++
          const upstream = httpRequest(
            { host: "127.0.0.1", port: storePort, method: req.method, path: url.pathname + url.search, headers: req.headers, agent: false },
            (answer) => {
              res.writeHead(answer.statusCode ?? 502, answer.headers)
              answer.pipe(res)
            }
          )
          upstream.on("error", () => res.destroy())
          req.pipe(upstream)
        })
        await new Promise<void>((resolve) => attacker!.listen(0, "127.0.0.1", resolve))
        const attackerPort = (attacker.address() as AddressInfo).port

        // Chromium starts while the store does. Only rebind.test goes through the "proxy"; loopback
        // addresses are reached directly.
        await together(
          startTestServer({
            services: { mcpServers: { demo: { command: demoServer.command, args: [...demoServer.args] } } }
          }).then(async (started) => {
            server = started
            await started.post("/for_store/wait_service", { client_id_or_service_name: "demo", status: "healthy", timeout: 30 })
          }),
          launchChromium([`--proxy-server=http://127.0.0.1:${attackerPort}`]).then((b) => (browser = b))
        )
        const store = server!
        const marker = join(store.dir, "pwned-marker")
        const fileBefore = store.readFileText()
        const servicesBefore = (await store.get("/for_store/list_services")).body.services.map((s: { name: string }) => s.name)
        const refusedBefore = await refusedPosts(store)

        const context = await browser!.newContext()

        // 1. A page on another origin.
        const cross = await context.newPage()
        await cross.goto(`http://127.0.0.1:${attackerPort}/attack.html`)
        const crossResults = (await cross.evaluate("window.run()")) as Array<{ label: string; path: string; type?: string; status?: number; error?: string }>
        expect(crossResults.length).toBe(4 * 5)
        // Whatever the browser let the page see: never a success.
        for (const r of crossResults) {
          if (r.type === "basic" || r.type === "cors") expect(r.status, `${r.label} ${r.path}`).toBeGreaterThanOrEqual(400)
        }
        // The JSON fetch needs a preflight, which the store refuses: the browser never sends it.
        expect(crossResults.filter((r) => r.label === "json with preflight").every((r) => r.error !== undefined)).toBe(true)

        // 2. A DNS-rebinding page: same origin as far as the browser knows.
        const rebound = await context.newPage()
        await rebound.goto(`http://rebind.test:${store.running.port}/rebind.html`)
        const reboundResults = (await rebound.evaluate("window.run()")) as Array<{ label: string; path: string; status?: number; body?: string }>
        expect(reboundResults.length).toBe(4 * 2)
        for (const r of reboundResults) {
          expect(r.status, `${r.label} ${r.path}`).toBe(403)
          expect(JSON.parse(r.body ?? "{}").error.code).toBe("FORBIDDEN_HOST")
        }
        expect(forwarded).toBe(reboundResults.length)

        // The store received the cross-origin requests and refused them (the preflighted ones never came).
        const refused = (await refusedPosts(store)) - refusedBefore
        expect(refused).toBeGreaterThanOrEqual(4 * 4 + reboundResults.length)

        // Nothing changed, nothing ran.
        expect(store.readFileText()).toBe(fileBefore)
        const servicesAfter = (await store.get("/for_store/list_services")).body.services.map((s: { name: string }) => s.name)
        expect(servicesAfter).toEqual(servicesBefore)
        const records = (await store.get("/for_store/tool_records?limit=10")).body
        expect(records.success).toBe(true)
        expect(records.total).toBe(0)
        expect(existsSync(marker)).toBe(false)
        expect(processesMentioning(marker)).toEqual([])
      } finally {
        await browser?.close()
        await new Promise<void>((resolve) => (attacker ? attacker.close(() => resolve()) : resolve()))
        if (server) rmSync(join(server.dir, "pwned-marker"), { force: true })
        await server?.cleanup()
      }
    },
    120_000
  )
})
