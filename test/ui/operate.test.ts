/**
 * Operating the store from the dashboard (GET /ui) in a real headless Chromium (Debian's
 * `chromium`, driven by playwright-core), against a real store and real fixture services: each
 * action is done in the page and then checked against the API's state, never against the page
 * alone. Restart (the transitions grew), Disconnect then Enable (status and the services file's
 * `disabled` mark), Refresh tools, Delete with its confirmation (cancel keeps the service; confirm
 * removes it and its process ends), the add form (a working service; the API's 400 message for a
 * bad definition), an agent's service added and deleted, the detail panel's figures (the monitoring
 * routes' numbers), flapping (also while the status changes faster than the page's refresh delay),
 * and a hostile upstream whose stderr and tool names carry markup that must stay text. At the same
 * time, in a page of its own: the page's reading of the event stream (line ends, comments,
 * reconnection delays). The store and Chromium are started together, once for the file. Saves a
 * screenshot to test/artifacts/dashboard-operate.png. Skipped, with a note, when /usr/bin/chromium
 * is not installed.
 */
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import type { Locator, Page } from "playwright-core"
import { afterAll, beforeAll, describe, it } from "vitest"
import { REPO_ROOT, stdioFixture } from "../fixtures/paths.js"
import { eventually, haveChromium, openChromium, type ChromiumLease, noteMissingChromium, serviceRow, processGone, startTestServer, together, type TestServer } from "../support/index.js"

noteMissingChromium("dashboard operations test")

const ARTIFACTS = join(REPO_ROOT, "test", "artifacts")

/** Markup an upstream server puts where a name or a message goes: it must be shown, never parsed. */
const HOSTILE = `<img src=x data-testid=injected onerror="window.__pwned=1"><b data-testid=injected>bold</b>`

describe.skipIf(!haveChromium)("operating the store from /ui in Chromium", () => {
  let server: TestServer
  let browser: ChromiumLease
  let page: Page
  const pageErrors: string[] = []
  const violations: string[] = []

  const row = (name: string, scope = "store"): Locator => serviceRow(page, name, scope)
  const outcome = () => page.getByTestId("action-result")
  /** Waits for the outcome of `action` on `name` and returns its text. */
  const outcomeOf = async (action: string, name: string, state = "ok"): Promise<string> => {
    await page.locator(`[data-testid="action-result"][data-action="${action}"][data-service="${name}"][data-state="${state}"]`).waitFor({ timeout: 15_000 })
    return (await outcome().textContent()) ?? ""
  }
  const statusOf = async (name: string) => (await server.get(`/for_store/service_status/${name}`)).body

  beforeAll(async () => {
    // The browser starts while the store does: neither needs the other until the page is opened.
    await together(
      startTestServer({
        services: {
          mcpServers: {
            alpha: stdioFixture(),
            beta: stdioFixture(),
            // Fails at once, with markup on stderr: its error and stderr tail are the hostile upstream's words.
            broken: { command: "sh", args: ["-c", `echo '${HOSTILE}' >&2; exit 1`] },
            // Tool names with markup in them.
            hostile: stdioFixture("--prefix", HOSTILE)
          }
        }
      }).then((s) => (server = s)),
      openChromium().then((b) => (browser = b))
    )
    page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage()
    page.on("pageerror", (e) => pageErrors.push(String(e)))
    page.on("console", (m) => {
      if (/Content.Security.Policy/i.test(m.text())) violations.push(m.text())
    })
    await page.goto(`${server.url}/ui`)
    await row("alpha").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 30_000 })
    await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 10_000 })
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await server?.cleanup()
  })

  // Two groups at the same time (sibling suites marked concurrent run together): the actions, one
  // after another on the one page (each starts from the state the one before left), and the reading
  // of the event stream in a page of its own, which waits out the page's reconnection delays. Tests
  // that run beside another take `expect` from their context (vitest's global one follows one test).
  describe("actions", { concurrent: true }, () => {
    it.sequential("Restart: the API's message is shown, and the service's transitions grew", async ({ expect }) => {
      const before = (await statusOf("alpha")).transitions.length
      await row("alpha").locator('[data-action="restart"]').click()
      expect(await outcomeOf("restart", "alpha")).toContain("Service 'alpha' restarting")
      expect(await eventually(async () => (await statusOf("alpha")).transitions.length >= before + 2, 15_000)).toBe(true)
      await row("alpha").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 15_000 })
      expect((await statusOf("alpha")).status).toBe("healthy")
    })

    it.sequential("Disconnect, then Enable: the status and the services file follow", async ({ expect }) => {
      await row("alpha").locator('[data-action="disconnect"]').click()
      await outcomeOf("disconnect", "alpha")
      await row("alpha").and(page.locator('[data-status="disconnected"]')).waitFor({ timeout: 15_000 })
      expect((await statusOf("alpha")).status).toBe("disconnected")
      expect((server.readFile()["mcpServers"] as Record<string, Record<string, unknown>>)["alpha"]?.["disabled"]).toBe(true)

      await row("alpha").locator('[data-action="enable"]').click()
      await outcomeOf("enable", "alpha")
      await row("alpha").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 15_000 })
      expect((await statusOf("alpha")).status).toBe("healthy")
      expect((server.readFile()["mcpServers"] as Record<string, Record<string, unknown>>)["alpha"]?.["disabled"]).toBeUndefined()
      await row("alpha").locator('[data-action="disconnect"]').waitFor()
    })

    it.sequential("Refresh tools: the outcome gives the tool count the API lists", async ({ expect }) => {
      await row("alpha").locator('[data-action="refresh"]').click()
      const text = await outcomeOf("refresh", "alpha")
      const tools = (await server.get("/for_store/list_tools?service_name=alpha")).body.total_tools as number
      expect(tools).toBeGreaterThan(0)
      expect(text).toContain(`alpha: ${tools} tool(s)`)
    })

    it.sequential("Delete asks first: Cancel keeps the service, Delete removes it and ends its process", async ({ expect }) => {
      const pid = Number((await server.post("/for_store/call_tool", { tool_name: "beta__pid" })).body.result)
      expect(pid).toBeGreaterThan(0)

      await row("beta").locator('[data-action="delete"]').click()
      const dialog = page.getByTestId("confirm-dialog")
      await dialog.waitFor({ state: "visible" })
      expect(await dialog.textContent()).toContain('"beta"')
      await page.getByTestId("confirm-cancel").click()
      await page.locator('[data-testid="action-result"][data-action="delete"][data-service="beta"][data-state="idle"]').waitFor()
      expect(((await server.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name)).toContain("beta")
      expect(processGone(pid)).toBe(false)

      await row("beta").locator('[data-action="delete"]').click()
      await dialog.waitFor({ state: "visible" })
      await page.getByTestId("confirm-ok").click()
      expect(await outcomeOf("delete", "beta")).toContain("beta")
      await row("beta").waitFor({ state: "detached", timeout: 10_000 })
      expect(((await server.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name)).not.toContain("beta")
      expect(Object.keys(server.readFile()["mcpServers"] as object)).not.toContain("beta")
      expect(await eventually(() => processGone(pid), 10_000)).toBe(true)
    })

    it.sequential("the detail panel shows the monitoring routes' figures", async ({ expect }) => {
      for (const text of ["one", "two", "three"]) {
        expect((await server.post("/for_store/call_tool", { tool_name: "alpha__echo", args: { text } })).body.success).toBe(true)
      }
      expect((await server.post("/for_store/call_tool", { tool_name: "alpha__fail" })).body.is_error).toBe(true)

      expect(await page.getByTestId("detail").isHidden()).toBe(true)
      await row("alpha").locator('[data-action="details"]').click()
      const detail = page.locator('[data-testid="detail"][data-name="alpha"][data-loaded="true"]')
      await detail.waitFor({ timeout: 10_000 })
      const rates = (await server.get("/monitoring/error_rate_stats?minutes=60&service_name=alpha&agent_id=store")).body
      expect(rates.total_calls).toBeGreaterThanOrEqual(4)
      // The call records are written by then; the panel's figures are the API's.
      await expect.poll(() => page.getByTestId("detail-calls").getAttribute("data-count"), { timeout: 5_000 }).toBe(String(rates.total_calls))
      expect(await page.getByTestId("detail-errors").getAttribute("data-count")).toBe(String(rates.failed_calls))
      expect(rates.failed_calls).toBeGreaterThanOrEqual(1)

      const status = await statusOf("alpha")
      expect(await page.getByTestId("detail-status").textContent()).toBe(status.status)
      expect(await page.getByTestId("detail-reconnects").getAttribute("data-count")).toBe(String(status.reconnect_attempts))
      expect(await page.getByTestId("detail-transitions").getAttribute("data-count")).toBe(String(status.transitions.length))
      const hour = (await server.get("/monitoring/service_health_history?service_name=alpha&agent_id=store&hours=1")).body
      expect(await page.getByTestId("detail-flaps").getAttribute("data-count")).toBe(String(hour.transitions.length))
      // Restart, disconnect and enable above: 1 + 2 + 2 + 2 transitions at least.
      expect(hour.transitions.length).toBeGreaterThanOrEqual(7)

      const times = (await server.get("/monitoring/services_response_time?service_name=alpha&agent_id=store")).body.services[0]
      expect(times.p50_ms).toBeGreaterThan(0)
      expect(await page.getByTestId("detail-p50").textContent()).toMatch(/ms$/)
      expect(await page.getByTestId("detail-p95").textContent()).toMatch(/ms$/)
      // alpha changed status 7 times within the hour: the table shows it flapping, with the API's count.
      const alpha = row("alpha")
      await alpha.and(page.locator('[data-flapping="true"]')).waitFor({ timeout: 10_000 })
      // (the table's count follows the status events: a transition after the API's read shows a moment later)
      await expect
        .poll(async () => Number(await alpha.getByTestId("service-flaps").evaluate((td) => td.firstChild?.textContent)), { timeout: 10_000 })
        .toBeGreaterThanOrEqual(hour.transitions.length)
    })

    it.sequential("a service whose status changes faster than the page's refresh delay has its changes counted while it goes on", async ({ expect }) => {
      const flaps = async () => Number(await row("alpha").getByTestId("service-flaps").evaluate((td) => td.firstChild?.textContent ?? "0", undefined, { timeout: 5_000 })) || 0
      const start = await flaps()
      // Restarts back to back: two status events each (healthy → initializing → healthy), closer
      // together than the refresh's delay when connecting is quick (a refresh put off at every
      // event never came while they went on). Each round waits for healthy: a restart while still
      // initializing re-enters it and changes no status.
      let counted = start
      for (let round = 0; round < 25 && counted < start + 4; round++) {
        expect((await server.post("/for_store/restart_service", { service_name: "alpha" })).status).toBe(200)
        const waited = await server.post("/for_store/wait_service", { client_id_or_service_name: "alpha", status: "healthy", timeout: 15 })
        expect(waited.body.success).toBe(true)
        counted = await flaps()
      }
      expect(counted).toBeGreaterThanOrEqual(start + 4)
      await row("alpha").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 15_000 })
    })

    it.sequential("a hostile upstream's stderr, error and tool names are shown as text, never as markup", async ({ expect }) => {
      // broken fails on every attempt: its last error quotes its stderr, markup included.
      await expect.poll(async () => (await statusOf("broken")).last_error ?? "", { timeout: 15_000 }).toContain(HOSTILE)
      await row("broken").locator('[data-action="details"]').click()
      await page.locator('[data-testid="detail"][data-name="broken"][data-loaded="true"]').waitFor({ timeout: 10_000 })
      await expect.poll(() => page.getByTestId("detail-last-error").textContent(), { timeout: 10_000 }).toContain(HOSTILE)
      expect(await row("broken").locator("td.err").textContent()).toContain(HOSTILE)
      // Its recent errors: the failed attempts of the last hour, each with the quoted stderr.
      await expect.poll(() => page.getByTestId("recent-error").first().textContent(), { timeout: 10_000 }).toContain(HOSTILE)

      // hostile's stderr tail holds the SDK's warnings about its tool names, markup and all.
      expect((await statusOf("hostile")).stderr_tail.join("\n")).toContain(HOSTILE)
      await row("hostile").locator('[data-action="details"]').click()
      await page.locator('[data-testid="detail"][data-name="hostile"][data-loaded="true"]').waitFor({ timeout: 10_000 })
      expect(await page.getByTestId("detail-stderr").textContent()).toContain(`${HOSTILE}echo`)
      await page.getByTestId("detail-close").click()
      await page.getByTestId("detail").waitFor({ state: "hidden" })

      // The hostile service's tools are listed under their names, markup and all, as text.
      await page.locator('[data-testid="tool-item"]').filter({ hasText: `hostile__${HOSTILE}echo` }).first().waitFor({ timeout: 15_000 })
      expect(await page.locator('[data-testid="injected"]').count()).toBe(0)
      expect(await page.locator("img").count()).toBe(0)
      expect(await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned)).toBeUndefined()
    })

    it.sequential("the add form creates a working service, and shows the API's 400 message for a bad one", async ({ expect }) => {
      // Both a URL and a command: the API refuses it; the page shows the API's own message.
      await page.getByTestId("add-name").fill("gamma")
      await page.getByTestId("add-url").fill("http://127.0.0.1:9/mcp")
      await page.getByTestId("add-command").fill(process.execPath)
      await page.getByTestId("add-button").click()
      const result = page.getByTestId("add-result")
      await page.locator('[data-testid="add-result"][data-state="error"]').waitFor({ timeout: 10_000 })
      const refused = await server.post("/for_store/add_service", { name: "gamma", url: "http://127.0.0.1:9/mcp", command: process.execPath })
      expect(refused.status).toBe(400)
      expect(await result.textContent()).toContain(refused.body.message)
      expect(await page.getByTestId("add-meta").textContent()).toBe("HTTP 400")
      expect(((await server.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name)).not.toContain("gamma")

      await page.getByTestId("add-url").fill("")
      // The fixture's bundle and a flag: the arguments, one a line, become the definition's list.
      const gamma = stdioFixture("--name", "gamma")
      await page.getByTestId("add-args").fill(gamma.args.join("\n"))
      await page.getByTestId("add-button").click()
      await page.locator('[data-testid="add-result"][data-state="ok"]').waitFor({ timeout: 10_000 })
      await row("gamma").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 20_000 })
      const call = await server.post("/for_store/call_tool", { tool_name: "gamma__add", args: { a: 2, b: 3 } })
      expect(call.status).toBe(200)
      expect(call.body.success).toBe(true)
      expect((server.readFile()["mcpServers"] as Record<string, { command: string; args: string[] }>)["gamma"]).toMatchObject({
        command: gamma.command,
        args: gamma.args
      })
    })

    it.sequential("an agent's service: added through the form with an agent id, deleted from its row", async ({ expect }) => {
      await page.getByTestId("add-name").fill("delta")
      await page.getByTestId("add-agent").fill("team-1")
      const delta = stdioFixture("--name", "delta")
      await page.getByTestId("add-command").fill(delta.command)
      await page.getByTestId("add-args").fill(delta.args.join("\n"))
      await page.getByTestId("add-button").click()
      await page.locator('[data-testid="add-result"][data-state="ok"]').waitFor({ timeout: 10_000 })
      const agentRow = row("delta", "team-1")
      await agentRow.and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 20_000 })
      const listed = async () => ((await server.get("/for_agent/team-1/list_services")).body.services as Array<{ name: string }>).map((s) => s.name)
      expect(await listed()).toEqual(["delta"])
      // The store's own actions are not offered for an agent's service: the API has them for the store only.
      expect(await agentRow.locator('[data-action="restart"]').count()).toBe(0)
      const pid = Number((await server.post("/for_agent/team-1/call_tool", { tool_name: "delta__pid" })).body.result)

      await agentRow.locator('[data-action="delete"]').click()
      await page.getByTestId("confirm-ok").click()
      await outcomeOf("delete", "delta")
      await agentRow.waitFor({ state: "detached", timeout: 10_000 })
      expect(await listed()).toEqual([])
      expect(await eventually(() => processGone(pid), 10_000)).toBe(true)
    })

    it.sequential("links to /docs and /metrics, and ran without a page error or a policy violation", async ({ expect }) => {
      expect(await page.getByTestId("docs-link").evaluate((a) => (a as unknown as { href: string }).href)).toBe(`${server.url}/docs`)
      expect(await page.getByTestId("metrics-link").evaluate((a) => (a as unknown as { href: string }).href)).toBe(`${server.url}/metrics`)
      expect((await server.get("/metrics")).status).toBe(200)
      expect(pageErrors).toEqual([])
      expect(violations).toEqual([])
      mkdirSync(ARTIFACTS, { recursive: true })
      await page.screenshot({ path: join(ARTIFACTS, "dashboard-operate.png"), fullPage: true })
    })
  })

  describe("event stream", { concurrent: true }, () => {
    it("reads the event stream as the format says (CR, LF and CRLF line ends, comments, multi-line data), and reconnects when it ends", async ({ expect }) => {
      const other = await page.context().newPage()
      try {
        const served: number[] = []
        // A stream the page gets whole, then ended: each connection serves it once.
        const body =
          ": a comment\r\n\r\n" +
          "event: nonsense\r\ndata: {}\r\n\r\n" +
          'event: status\rdata: {"scope":"store","service_name":"alpha",\r\ndata:"from":"healthy","to":"warning"}\n\n' +
          'event: status\ndata: {"scope":"store","service_name":"alpha","from":"warning","to":"healthy"}\r\r'
        await other.route("**/events", async (route) => {
          served.push(Date.now())
          await route.fulfill({ status: 200, headers: { "content-type": "text/event-stream" }, body })
        })
        await other.goto(`${server.url}/ui`)
        // Both status events of each connection (two per connection); "nonsense" is no event the page knows.
        await expect.poll(() => other.getByTestId("last-event").textContent(), { timeout: 10_000 }).toMatch(/^[2468] event\(s\); last alpha: warning → healthy$/)
        expect(await other.getByTestId("last-event").getAttribute("data-type")).toBe("status")
        // Each stream ended at once: tried again after a growing delay (1 s, then 2 s), not every second.
        // Lower bounds only (a loaded machine may stretch either gap, so they are not compared).
        await expect.poll(() => served.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(3)
        const [a, b, c] = served as [number, number, number]
        expect(b - a).toBeGreaterThanOrEqual(800)
        expect(c - b).toBeGreaterThanOrEqual(1500)
      } finally {
        await other.close()
      }
    })
  })
})
