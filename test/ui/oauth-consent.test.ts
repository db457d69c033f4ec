/**
 * The built-in authorization server's consent page (GET /oauth/authorize, src/http/oauth-server/consent-page.ts)
 * in a real headless Chromium: the SDK v2 client makes the authorization URL, the browser opens it,
 * the page shows the client, its redirect URI and the agent (markup in the client's name stays
 * text), a wrong admin key is refused on the page, the right one with a tools list approves, and the
 * browser lands on the client's callback with a code and `iss`, which the SDK exchanges for a token
 * bound to the agent and the tools. A second client is denied: its callback gets `access_denied`.
 * The page's script runs under its Content-Security-Policy (it would do nothing if the hash were
 * wrong). Skipped, with a note, when Chromium is not installed.
 */
import type { Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auth } from "@modelcontextprotocol/client"
import { decodeJwt } from "jose"
import { haveChromium, openChromium, type ChromiumLease, MemoryOAuthProvider, noteMissingChromium, startClientSite, startTestServer, together, type TestServer } from "../support/index.js"

noteMissingChromium("OAuth consent page test")

const ADMIN = "admin-key-for-consent-page-test"
const A = "agent-a"

describe.skipIf(!haveChromium)("the consent page in Chromium", () => {
  let server: TestServer
  let site: Awaited<ReturnType<typeof startClientSite>>
  let browser: ChromiumLease
  let page: Page
  let resource: string

  beforeAll(async () => {
    await together(
      startClientSite().then(async (s) => {
        site = s
        server = await startTestServer({ apiKey: ADMIN, options: { auth_server: true, auth_dev_loopback_clients: true } })
      }),
      openChromium().then((b) => (browser = b))
    )
    resource = `${server.url}/for_agent/${A}/mcp`
    page = await (await browser.newContext()).newPage()
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await server?.cleanup()
    await site?.close()
  })

  const clientOf = async (name: string, label: string) => {
    const id = `${site.base}/${name}.json`
    site.docs.set(`/${name}.json`, { client_id: id, client_name: label, redirect_uris: [`${site.base}/callback`] })
    const provider = new MemoryOAuthProvider(id, `${site.base}/callback`, resource)
    expect(await auth(provider, { serverUrl: resource })).toBe("REDIRECT")
    return provider
  }

  it("approves with the admin key and a tools list; the browser lands on the callback with a code the SDK exchanges", { timeout: 60_000 }, async () => {
    const provider = await clientOf("app", "<img src=x onerror=alert(1)>App")
    await page.goto(provider.lastUrl!.href)
    await expect.poll(() => page.getByTestId("client-name").textContent()).toBe("<img src=x onerror=alert(1)>App")
    expect(await page.getByTestId("agent").textContent()).toBe(A)
    expect(await page.getByTestId("redirect").textContent()).toBe(`${site.base}/callback`)
    expect(await page.locator("img").count()).toBe(0)
    // Its redirect URI is on loopback: the page says what that means.
    expect(await page.getByTestId("loopback-warning").isVisible()).toBe(true)
    // A wrong key: refused on the page, nothing decided.
    await page.getByTestId("key").fill("not-the-key")
    await page.getByTestId("approve").click()
    await page.locator('[data-testid="outcome"][data-state="error"]').waitFor({ timeout: 10_000 })
    expect(site.callbacks).toHaveLength(0)
    await page.getByTestId("key").fill(ADMIN)
    await page.getByTestId("tools").fill("svc__echo, svc__add")
    await page.getByTestId("approve").click()
    await page.waitForURL((url) => url.pathname === "/callback", { timeout: 15_000 })
    const back = site.callbacks.at(-1)!
    expect(back.searchParams.get("iss")).toBe(server.url)
    expect(back.searchParams.get("state")).toBe(provider.lastUrl!.searchParams.get("state"))
    expect(await auth(provider, { serverUrl: resource, authorizationCode: back.searchParams.get("code")!, iss: back.searchParams.get("iss")! })).toBe("AUTHORIZED")
    expect(decodeJwt(provider.saved!.access_token)).toMatchObject({ agent_id: A, tools: ["svc__echo", "svc__add"], aud: resource, iss: server.url })
  })

  it("deny: the client's callback gets access_denied and no code", { timeout: 60_000 }, async () => {
    const provider = await clientOf("other", "Other app")
    await page.goto(provider.lastUrl!.href)
    await page.getByTestId("client-name").filter({ hasText: "Other app" }).waitFor({ timeout: 10_000 })
    // The key typed before is kept for this tab (sessionStorage), as the dashboard keeps it.
    expect(await page.getByTestId("key").inputValue()).toBe(ADMIN)
    await page.getByTestId("deny").click()
    await page.waitForURL((url) => url.pathname === "/callback", { timeout: 15_000 })
    const back = site.callbacks.at(-1)!
    expect(back.searchParams.get("error")).toBe("access_denied")
    expect(back.searchParams.get("code")).toBeNull()
  })
})
