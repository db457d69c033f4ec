/**
 * The dashboard (GET /ui) in a real headless Chromium (Debian's `chromium`, driven by playwright-core):
 * the demo service turns healthy on the page, a call of demo__add through the form shows 5 and lands
 * in the recent-calls list, and the page asks nothing of any host but the store. Saves a screenshot
 * to test/artifacts/dashboard.png. The API docs (GET /docs, Swagger UI) render under their policy.
 * With an API key: the key is asked once (kept in sessionStorage, never in a URL), the live events
 * come over fetch with the Authorization header and show a status change made from outside the
 * page, and a refused stream (429 at the cap) is tried again until the page is live. One Chromium
 * and the two stores (without and with a key) are started together for the file; each test has its
 * own browser context, and the tests run at the same time. Skipped, with a note, when
 * /usr/bin/chromium is not installed. The actions of the page are tested in operate.test.ts.
 */
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import type { BrowserContext } from "playwright-core"
import {
  authedApi,
  haveChromium,
  openChromium,
  type ChromiumLease,
  noteMissingChromium,
  openSse,
  startTestServer,
  together,
  type SseStream,
  type TestServer
} from "../support/index.js"
import { afterAll, beforeAll, describe, it } from "vitest"
import { REPO_ROOT, demoServer } from "../fixtures/paths.js"

noteMissingChromium("dashboard test")

const ARTIFACTS = join(REPO_ROOT, "test", "artifacts")
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]", "::1"])

/** URLs that left the machine: any network request to a host other than loopback. */
const foreign = (urls: ReadonlyArray<string>): string[] =>
  urls.filter((u) => {
    const url = new URL(u)
    if (!["http:", "https:", "ws:", "wss:"].includes(url.protocol)) return false // data:, blob:, about:
    return !LOOPBACK.has(url.hostname)
  })

// The tests run at the same time (describe.concurrent): Swagger UI takes seconds of CPU to render
// /docs, and the keyed test waits out a Retry-After; neither waits for the other.
describe.skipIf(!haveChromium).concurrent("GET /ui in Chromium", () => {
  const demo = () => ({ mcpServers: { demo: { command: demoServer.command, args: [...demoServer.args] } } })
  let browser: ChromiumLease | undefined
  /** The store without an API key (the first test, and /docs). */
  let open: TestServer | undefined
  /** The store with an API key and one event stream at most (the second test). */
  let keyed: TestServer | undefined
  const KEY = "dashboard-key-7f3a9c"

  beforeAll(async () => {
    await together(
      openChromium().then((b) => (browser = b)),
      startTestServer({ services: demo() }).then((s) => (open = s)),
      startTestServer({ apiKey: KEY, options: { max_event_streams: 1 }, services: demo() }).then((s) => (keyed = s))
    )
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await Promise.all([open?.cleanup(), keyed?.cleanup()])
  })

  it(
    "shows the demo service healthy, calls demo__add through the form, lists the call",
    async ({ expect }) => {
      const server = open!
      let context: BrowserContext | undefined
      try {
        context = await browser!.newContext({ viewport: { width: 1360, height: 900 } })
        const page = await context.newPage()
        const requested: string[] = []
        const pageErrors: string[] = []
        page.on("request", (r) => requested.push(r.url()))
        page.on("pageerror", (e) => pageErrors.push(String(e)))
        // The page runs under its Content-Security-Policy: any violation shows on the console.
        const violations: string[] = []
        page.on("console", (m) => {
          if (/Content.Security.Policy/i.test(m.text())) violations.push(m.text())
        })

        const response = await page.goto(`${server.url}/ui`)
        expect(response?.status()).toBe(200)
        expect(response?.headers()["content-type"]).toMatch(/^text\/html/)

        // No key on this server: the page asks for none and its event stream is live.
        await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 15_000 })
        expect(await page.getByTestId("auth-form").isHidden()).toBe(true)

        // Live status: the demo service's row reaches healthy.
        await page
          .locator('[data-testid="service-row"][data-name="demo"][data-scope="store"][data-status="healthy"]')
          .waitFor({ timeout: 30_000 })

        // The form: choose demo__add (its arguments are prefilled from the schema), call it.
        const select = page.getByTestId("tool-select")
        await select.locator('option[value="store/demo__add"]').waitFor({ state: "attached", timeout: 15_000 })
        await select.selectOption("store/demo__add")
        expect(JSON.parse(await page.getByTestId("args-input").inputValue())).toEqual({ a: 0, b: 0 })
        await page.getByTestId("args-input").fill('{"a":2,"b":3}')
        await page.getByTestId("call-button").click()

        const result = page.getByTestId("call-result")
        await expect.poll(() => result.getAttribute("data-state"), { timeout: 15_000 }).toBe("ok")
        expect(JSON.parse((await result.textContent()) ?? "null")).toEqual({ sum: 5 })

        // The call shows up in the recent calls (tool_call event, or the refresh after the call).
        await page
          .getByTestId("calls-list")
          .locator('[data-testid="call-row"][data-service="demo"][data-tool="add"][data-outcome="success"]')
          .first()
          .waitFor({ timeout: 15_000 })

        // The chart counts the healthy service.
        await expect
          .poll(() => page.locator('[data-testid="status-chart"] [data-status="healthy"]').getAttribute("data-count"), { timeout: 10_000 })
          .toBe("1")

        // The service's detail panel, for the screenshot: figures from the monitoring routes.
        await page.locator('[data-testid="service-row"][data-name="demo"] [data-action="details"]').click()
        await page.locator('[data-testid="detail"][data-name="demo"][data-loaded="true"]').waitFor({ timeout: 10_000 })
        await expect.poll(() => page.getByTestId("detail-calls").getAttribute("data-count"), { timeout: 10_000 }).toBe("1")

        mkdirSync(ARTIFACTS, { recursive: true })
        await page.screenshot({ path: join(ARTIFACTS, "dashboard.png"), fullPage: true })

        expect(requested.length).toBeGreaterThan(0)
        expect(foreign(requested)).toEqual([])
        expect(pageErrors).toEqual([])
        expect(violations).toEqual([])
        expect(response?.headers()["content-security-policy"]).toContain("script-src 'sha256-")
      } finally {
        await context?.close()
      }
    },
    90_000
  )

  it(
    "GET /docs renders the API under its policy",
    async ({ expect }) => {
      let context: BrowserContext | undefined
      try {
        context = await browser!.newContext()
        const docs = await context.newPage()
        const docsErrors: string[] = []
        const violations: string[] = []
        docs.on("pageerror", (e) => docsErrors.push(String(e)))
        docs.on("console", (m) => {
          if (/Content.Security.Policy/i.test(m.text())) violations.push(m.text())
        })
        await docs.goto(`${open!.url}/docs`)
        await docs.locator(".opblock").first().waitFor({ timeout: 40_000 }) // Swagger UI renders slowly on a loaded machine
        expect(await docs.locator(".opblock").count()).toBeGreaterThan(50)
        expect(docsErrors).toEqual([])
        expect(violations).toEqual([])
      } finally {
        await context?.close()
      }
    },
    90_000
  )

  it(
    "served at another spelling of /ui (a `;` parameter, a percent-encoded letter), reads the API at the store's root",
    async ({ expect }) => {
      let context: BrowserContext | undefined
      try {
        context = await browser!.newContext()
        for (const spelling of ["/ui;x", "/%75i"]) {
          const page = await context.newPage()
          const requested: string[] = []
          page.on("request", (r) => requested.push(new URL(r.url()).pathname))
          expect((await page.goto(`${open!.url}${spelling}`))?.status(), spelling).toBe(200)
          await page.locator('[data-testid="service-row"][data-name="demo"]').waitFor({ timeout: 15_000 })
          await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 15_000 })
          expect(requested, spelling).toContain("/for_store/list_services")
          expect(requested, spelling).toContain("/events")
          expect(await page.getByTestId("docs-link").evaluate((a) => (a as unknown as { href: string }).href)).toBe(`${open!.url}/docs`)
          await page.close()
        }
      } finally {
        await context?.close()
      }
    },
    60_000
  )

  it(
    "with an API key: asked once, live events over fetch with the key, a change from outside shown, a refused stream tried again",
    async ({ expect }) => {
      const server = keyed!
      let context: BrowserContext | undefined
      let outside: SseStream | undefined
      try {
        const admin = authedApi(server.url, KEY)
        context = await browser!.newContext()
        const page = await context.newPage()
        const requests: Array<{ url: string; authorization: string | undefined }> = []
        const pageErrors: string[] = []
        page.on("request", (r) => requests.push({ url: r.url(), authorization: r.headers()["authorization"] }))
        page.on("pageerror", (e) => pageErrors.push(String(e)))

        await page.goto(`${server.url}/ui`)
        // The key is asked for, once.
        await page.locator('[data-testid="connection"][data-mode="auth"]').waitFor({ timeout: 10_000 })
        await page.getByTestId("api-key-input").fill(KEY)
        await page.getByTestId("api-key-input").press("Enter")
        await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 15_000 })
        await page.locator('[data-testid="service-row"][data-name="demo"][data-status="healthy"]').waitFor({ timeout: 30_000 })
        expect(await page.getByTestId("auth-form").isHidden()).toBe(true)
        expect(await page.evaluate(() => (globalThis as unknown as { sessionStorage: { getItem(k: string): string | null } }).sessionStorage.getItem("mcp-store.api-key"))).toBe(KEY)
        // The stream was read with the key in its header; no URL ever carried the key.
        expect(requests.some((r) => new URL(r.url).pathname === "/events" && r.authorization === `Bearer ${KEY}`)).toBe(true)
        expect(requests.filter((r) => r.url.includes(KEY))).toEqual([])

        // A change made from outside the page reaches it over the stream (the page does not poll while live).
        const off = await admin.post("/for_store/disconnect_service", { service_name: "demo" })
        expect(off.status).toBe(200)
        await page.locator('[data-testid="service-row"][data-name="demo"][data-status="disconnected"]').waitFor({ timeout: 5_000 })
        await expect
          .poll(() => page.getByTestId("last-event").textContent(), { timeout: 5_000 })
          .toMatch(/demo: \S+ → disconnected/)
        expect(await page.getByTestId("last-event").getAttribute("data-type")).toBe("status")
        expect((await admin.get("/for_store/service_status/demo")).body.status).toBe("disconnected")

        // The only stream slot taken by another client: the page, reloaded, needs no key again, polls,
        // and is live again once the slot is free (tried again after the 429's Retry-After).
        await page.goto("about:blank")
        const events = `${server.url}/events`
        for (let i = 0; i < 100 && outside?.status !== 200; i++) {
          outside?.close()
          outside = await openSse(events, { authorization: `Bearer ${KEY}` })
        }
        expect(outside?.status).toBe(200)
        const refused = page.waitForResponse((r) => new URL(r.url()).pathname === "/events" && r.status() === 429, { timeout: 10_000 })
        await page.goto(`${server.url}/ui`)
        await refused
        await page.locator('[data-testid="connection"][data-mode="polling"]').waitFor({ timeout: 10_000 })
        expect(await page.getByTestId("auth-form").isHidden()).toBe(true)
        await page.locator('[data-testid="service-row"][data-name="demo"][data-status="disconnected"]').waitFor({ timeout: 10_000 })
        outside!.close()
        await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 15_000 })

        // Forget key: the key leaves the tab's storage and the page asks for it again.
        await page.getByTestId("forget-key").click()
        await page.locator('[data-testid="connection"][data-mode="auth"]').waitFor({ timeout: 10_000 })
        expect(await page.getByTestId("auth-form").isVisible()).toBe(true)
        expect(await page.evaluate(() => (globalThis as unknown as { sessionStorage: { length: number } }).sessionStorage.length)).toBe(0)
        expect(pageErrors).toEqual([])
      } finally {
        outside?.close()
        await context?.close()
      }
    },
    60_000
  )
})
