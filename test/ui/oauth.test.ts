/**
 * The dashboard (GET /ui) and an OAuth-protected upstream, in a real headless Chromium: the
 * service's row shows its `auth.state`; for `needs_authorization` its Authorize button calls
 * authorize_service and opens the authorization URL, whose page (the fixture approves at once)
 * sends the browser to the store's callback: the service becomes healthy and the row says
 * authorized. A second service's authorization started through the API (its status unchanged)
 * shows on its row from the `auth` event alone, and the callback's page may not be framed. A
 * principal's own authorization (per_user oauth) ends in the callback's question, answered with its
 * button: the form posts back to the store and the principal's calls carry its own token. Chromium
 * is launched while the fixture and the store start. Skipped, with a note, when /usr/bin/chromium is
 * not installed.
 */
import type { Locator, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { haveChromium, openChromium, type ChromiumLease, noteMissingChromium, serviceRow, startTestServer, together, type TestServer } from "../support/index.js"

noteMissingChromium("dashboard OAuth test")

describe.skipIf(!haveChromium)("an OAuth-protected upstream on /ui", () => {
  let fixture: OAuthFixture
  let server: TestServer
  let browser: ChromiumLease
  let page: Page

  const row = (name: string): Locator => serviceRow(page, name)

  beforeAll(async () => {
    // Chromium starts while the authorization server and then the store do.
    await together(
      startOAuthFixture().then(async (f) => {
        fixture = f
        server = await startTestServer({ services: { mcpServers: { secure: { url: f.url }, other: { url: f.url }, mine: { url: f.url, per_user: { oauth: true } } } } })
      }),
      openChromium().then((b) => (browser = b))
    )
    page = await (await browser.newContext()).newPage()
    await page.goto(`${server.url}/ui`)
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await server?.cleanup()
    await fixture?.stop()
  })

  it("follows the auth event: an authorization started elsewhere shows on the row while the status stays the same", async () => {
    await page.locator('[data-testid="connection"][data-mode="live"]').waitFor({ timeout: 20_000 })
    await row("other").locator('[data-testid="service-auth"][data-auth="needs_authorization"]').waitFor({ timeout: 20_000 })
    const status = await row("other").getAttribute("data-status")
    const started = await server.post("/for_store/authorize_service", { service_name: "other" })
    expect(started.body).toMatchObject({ success: true, state: "authorizing" })
    // Live, the page polls nothing: the auth event is what makes it read the row again.
    await row("other").locator('[data-testid="service-auth"][data-auth="authorizing"]').waitFor({ timeout: 5_000 })
    expect(await row("other").getAttribute("data-status")).toBe(status)
  })

  it("the callback's page may not be framed", async () => {
    const reply = await fetch(`${server.url}/oauth/callback`)
    expect(reply.status).toBe(400)
    expect(reply.headers.get("x-frame-options")).toBe("DENY")
    expect(reply.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
  })

  it("shows needs_authorization, and Authorize opens the authorization page that ends in the store's callback", { timeout: 60_000 }, async () => {
    await row("secure").locator('[data-testid="service-auth"][data-auth="needs_authorization"]').waitFor({ timeout: 20_000 })
    const opened = page.context().waitForEvent("page")
    await row("secure").locator('[data-action="authorize"]').click()
    await page.locator('[data-testid="action-result"][data-action="authorize"][data-state="ok"]').waitFor({ timeout: 15_000 })
    const link = await page.getByTestId("authorize-link").getAttribute("href")
    expect(new URL(link as string).origin).toBe(new URL(fixture.url).origin)
    // The new tab: the authorization server's page, then the store's callback.
    const tab = await opened
    await tab.waitForURL((url) => url.pathname === "/oauth/callback", { timeout: 15_000 })
    await row("secure").and(page.locator('[data-status="healthy"]')).waitFor({ timeout: 20_000 })
    await row("secure").locator('[data-testid="service-auth"][data-auth="authorized"]').waitFor({ timeout: 10_000 })
    expect(await row("secure").locator('[data-action="authorize"]').count()).toBe(0)
    expect((await server.get("/for_store/service_status/secure")).body.status).toBe("healthy")
  })

  it("a principal's own authorization: the callback names who asks, and its Connect button finishes it", { timeout: 60_000 }, async () => {
    // The service's shared connection is authorized first (its tool list), as for any OAuth upstream.
    const shared = await server.post("/for_store/authorize_service", { service_name: "mine" })
    expect(shared.status, shared.text).toBe(200)
    const back = await fetch(shared.body.authorization_url as string, { redirect: "manual" })
    expect((await fetch(back.headers.get("location") as string)).status).toBe(200)
    expect((await server.post("/for_store/wait_service", { client_id_or_service_name: "mine", status: "healthy", timeout: 15 })).status).toBe(200)
    const own = await server.post("/for_store/credentials/mine/authorize")
    expect(own.status, own.text).toBe(200)
    const tab = await page.context().newPage()
    await tab.goto(own.body.authorization_url as string)
    await tab.waitForURL((url) => url.pathname === "/oauth/callback", { timeout: 15_000 })
    expect(await tab.locator("p").textContent()).toContain("asked to use your account of service 'mine'")
    await Promise.all([tab.waitForNavigation({ timeout: 15_000 }), tab.getByRole("button", { name: "Connect my account" }).click()])
    expect(await tab.locator("p").textContent()).toContain("Authorized: your calls of the service now carry your own token")
    const call = await server.post("/for_store/call_tool", { tool_name: "mine__whoami", args: {} })
    expect(call.status, call.text).toBe(200)
    await tab.close()
  })
})
