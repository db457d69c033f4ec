/**
 * The dashboard's card of calls waiting for an approval (README, "Approvals"), in a real headless
 * Chromium against a real store with an API key and the stdio fixture: the page a URL elicitation
 * points to (`/ui#approval=<id>`) outlines that call and shows its arguments as text (markup in
 * them stays text); Approve lets exactly that call run (its REST caller gets the tool's answer, the
 * other call of the same tool keeps waiting); Deny ends the other one with 403; each decision names
 * the dashboard's key in the record. Skipped, with a note, when /usr/bin/chromium is not installed.
 */
import type { Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { stdioFixture } from "../fixtures/paths.js"
import { authedApi, eventually, haveChromium, openChromium, type ChromiumLease, noteMissingChromium, startTestServer, together, type Api, type Reply, type TestServer } from "../support/index.js"

noteMissingChromium("dashboard approvals test")

const KEY = "approvals-ui-admin-key"
/** Markup in a call's arguments: the card must show it, never parse it. */
const HOSTILE = `<img src=x data-testid=injected onerror="window.__pwned=1">`

describe.skipIf(!haveChromium)("approving calls from /ui in Chromium", () => {
  let server: TestServer
  let admin: Api
  let browser: ChromiumLease
  let page: Page
  const pageErrors: string[] = []

  const pendingFor = async (text: string): Promise<{ approval_id: string }> => {
    let found: { approval_id: string } | undefined
    await eventually(async () => {
      found = ((await admin.get("/for_store/approvals")).body.approvals as Array<{ approval_id: string; arguments: { text?: string } }>).find((a) => a.arguments.text === text)
      return found !== undefined
    }, 10_000)
    expect(found, `an approval of ${text}`).toBeDefined()
    return found!
  }

  beforeAll(async () => {
    await together(
      startTestServer({ apiKey: KEY, services: { mcpServers: { guarded: { ...stdioFixture(), require_approval: ["echo"] } } } }).then((s) => (server = s)),
      openChromium().then((b) => (browser = b))
    )
    admin = authedApi(server.url, KEY)
    const waited = await admin.post("/for_store/wait_service", { client_id_or_service_name: "guarded", status: "healthy", timeout: 30 })
    expect(waited.body.data?.result, waited.text).toBe(true)
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } })
    // The key as the page keeps it once entered (sessionStorage), so the page starts signed in.
    await context.addInitScript({ content: `sessionStorage.setItem("mcp-store.api-key", ${JSON.stringify(KEY)})` })
    page = await context.newPage()
    page.on("pageerror", (e) => pageErrors.push(String(e)))
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await server?.cleanup()
  })

  it("the page outlines the call the URL names; Approve runs exactly that call, Deny refuses the other one", async () => {
    const first: Promise<Reply> = admin.post("/for_store/call_tool", { tool_name: "guarded__echo", args: { text: `first ${HOSTILE}` } })
    const second: Promise<Reply> = admin.post("/for_store/call_tool", { tool_name: "guarded__echo", args: { text: "second" } })
    const a = await pendingFor(`first ${HOSTILE}`)
    const b = await pendingFor("second")

    await page.goto(`${server.url}/ui#approval=${a.approval_id}`)
    const rowA = page.locator(`[data-testid="approval-row"][data-approval="${a.approval_id}"]`)
    const rowB = page.locator(`[data-testid="approval-row"][data-approval="${b.approval_id}"]`)
    await rowA.waitFor({ timeout: 15_000 })
    await rowB.waitFor({ timeout: 15_000 })
    expect(await rowA.getAttribute("class")).toContain("focus")
    expect(await rowB.getAttribute("class")).not.toContain("focus")
    expect(await rowA.getByTestId("approval-arguments").textContent()).toContain(HOSTILE.replace(/"/g, '\\"'))
    expect(await page.locator('[data-testid="injected"]').count()).toBe(0)

    await rowA.getByTestId("approval-approve").click()
    const answered = await first
    expect(answered.status, answered.text).toBe(200)
    expect(answered.body.result).toBe(`first ${HOSTILE}`)
    await rowA.waitFor({ state: "detached", timeout: 10_000 })
    // The other call of the same tool was not let through.
    expect((await admin.get(`/for_store/approvals/${b.approval_id}`)).status).toBe(200)

    await rowB.getByTestId("approval-deny").click()
    const refused = await second
    expect(refused.status, refused.text).toBe(403)
    expect(refused.body.error.code).toBe("APPROVAL_DENIED")
    await rowB.waitFor({ state: "detached", timeout: 10_000 })
    const records = await admin.get("/for_store/tool_records?limit=10")
    const decidedBy = (records.body.executions as Array<{ approval?: { approval_id: string; decided_by: string } }>).filter((r) => r.approval !== undefined).map((r) => [r.approval!.approval_id, r.approval!.decided_by])
    expect(decidedBy).toEqual(expect.arrayContaining([[a.approval_id, "admin key '--api-key'"], [b.approval_id, "admin key '--api-key'"]]))
    expect(await page.evaluate("window.__pwned")).toBeUndefined()
    expect(pageErrors).toEqual([])
  })
})
