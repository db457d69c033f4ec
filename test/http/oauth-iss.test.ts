/**
 * RFC 9207 on SDK v2's client: an authorization server that advertises
 * `authorization_response_iss_parameter_supported` sends its issuer with the code. The store's
 * callback passes it on; a pasted code (authorize_service, `mcp-store auth --code`) takes it as
 * `iss`, is refused with a 400 naming `iss` without it (the same state then still finishes), and an
 * `iss` of another issuer is refused (a mix-up), its value never shown. The SDK's console warnings
 * go to the store's log.
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from "vitest"
import { runAuth } from "../../src/cli/auth-command.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { freshDir, startTestServer, type TestServer } from "../support/index.js"

const EVIL = "https://evil.example/"

let fixture: OAuthFixture
let logs: CapturedLogs
let warned: MockInstance<typeof console.warn>
let server: TestServer

beforeAll(async () => {
  // Before any OAuth step of the SDK: what reaches the console is what is left after the store routed its own.
  warned = vi.spyOn(console, "warn").mockImplementation(() => undefined)
  logs = captureLogs({ level: "debug" })
  fixture = await startOAuthFixture({ iss: true })
  server = await startTestServer({ dir: freshDir() })
})
afterAll(async () => {
  await server?.cleanup()
  await fixture.stop()
  logs.restore()
  warned.mockRestore()
})

const waitFor = async (name: string, status: string) => (await server.post("/for_store/wait_service", { client_id_or_service_name: name, status, timeout: 15 })).status

/** Adds a service of the fixture, which waits for an authorization. */
const add = async (name: string) => {
  expect((await server.post("/for_store/add_service", { name, url: fixture.url })).status).toBe(200)
  expect(await waitFor(name, "unreachable")).toBe(200)
}

/** Starts the service's authorization and follows its URL as a browser would: the address it is sent back to. */
const approve = async (name: string): Promise<URL> => {
  const started = await server.post("/for_store/authorize_service", { service_name: name })
  expect(started.status).toBe(200)
  const answer = await fetch(started.body.authorization_url as string, { redirect: "manual" })
  expect(answer.status).toBe(302)
  return new URL(answer.headers.get("location") as string)
}

const paste = (name: string, back: URL, iss?: string) =>
  server.post("/for_store/authorize_service", { service_name: name, code: back.searchParams.get("code"), state: back.searchParams.get("state"), ...(iss !== undefined ? { iss } : {}) })

const fieldsOf = (reply: { body: any }) => reply.body.error.details.fields as Array<{ field: string; problem: string }>

describe("an authorization server that sends iss (RFC 9207)", () => {
  it("is advertised by the fixture, which sends its issuer with the code", async () => {
    const metadata = (await (await fetch(new URL("/.well-known/oauth-authorization-server", fixture.url))).json()) as Record<string, unknown>
    expect(metadata.authorization_response_iss_parameter_supported).toBe(true)
    expect(metadata.issuer).toBe(fixture.issuer)
  })

  it("is finished by the store's callback, which passes iss on; a callback with another iss is refused", { timeout: 30_000 }, async () => {
    await add("browser")
    const back = await approve("browser")
    expect(back.searchParams.get("iss")).toBe(fixture.issuer)
    // The code of the right state, claimed by another issuer: a mix-up, refused (the state is spent).
    const forged = new URL(back)
    forged.searchParams.set("iss", EVIL)
    const refused = await fetch(forged, { redirect: "manual" })
    expect(refused.status).toBe(400)
    const words = await refused.text()
    expect(words).toContain("mix-up")
    expect(words).not.toContain("evil.example")
    expect((await fetch(back, { redirect: "manual" })).status).toBe(400)
    expect(fixture.counts.authorization_code).toBe(0)

    const again = await approve("browser")
    const page = await fetch(again, { redirect: "manual" })
    expect(page.status).toBe(200)
    await page.text()
    expect(await waitFor("browser", "healthy")).toBe(200)
  })

  it("takes a pasted code with its iss; without it a 400 names iss and the same state still finishes", { timeout: 30_000 }, async () => {
    await add("pasted")
    const back = await approve("pasted")
    const missing = await paste("pasted", back)
    expect(missing.status).toBe(400)
    expect(missing.body.error.code).toBe("VALIDATION_ERROR")
    expect(fieldsOf(missing)).toEqual([{ field: "iss", problem: expect.stringContaining("give `iss` too") }])
    const done = await paste("pasted", back, back.searchParams.get("iss") as string)
    expect(done.status).toBe(200)
    expect(done.body.state).toBe("authorized")
    expect(await waitFor("pasted", "healthy")).toBe(200)

    // Another issuer's iss: refused, never echoed, and the state is spent.
    const next = await approve("pasted")
    const wrong = await paste("pasted", next, EVIL)
    expect(wrong.status).toBe(400)
    expect(fieldsOf(wrong)[0]?.field).toBe("iss")
    expect(JSON.stringify(wrong.body)).not.toContain("evil.example")
    expect((await paste("pasted", next, next.searchParams.get("iss") as string)).status).toBe(400)
    // An iss without a code is not a paste.
    expect(fieldsOf(await server.post("/for_store/authorize_service", { service_name: "pasted", iss: fixture.issuer }))[0]?.field).toBe("iss")
  })

  it("is finished from a terminal: mcp-store auth --code --state --iss", { timeout: 30_000 }, async () => {
    await add("terminal")
    const back = await approve("terminal")
    const run = async (...extra: string[]) => {
      const out: string[] = []
      const code = await runAuth(["terminal", "--url", server.url, "--code", back.searchParams.get("code") as string, "--state", back.searchParams.get("state") as string, ...extra], {}, {
        writeOut: (t) => void out.push(t),
        writeErr: (t) => void out.push(t)
      })
      return { code, text: out.join("") }
    }
    const without = await run()
    expect(without.code).toBe(1)
    expect(without.text).toContain("iss: ")
    const withIss = await run("--iss", back.searchParams.get("iss") as string)
    expect(withIss.text).toContain("terminal: authorized")
    expect(withIss.code).toBe(0)
    expect(await waitFor("terminal", "healthy")).toBe(200)
    const half: string[] = []
    expect(await runAuth(["terminal", "--url", server.url, "--iss", fixture.issuer], {}, { writeOut: (t) => void half.push(t), writeErr: (t) => void half.push(t) })).toBe(2)
  })

  it("writes nothing of the SDK to the console: a refused code's warning is a line of the store's log", { timeout: 30_000 }, async () => {
    await add("refused")
    const back = await approve("refused")
    const bad = new URL(back)
    bad.searchParams.set("code", "not-a-code")
    const refused = await paste("refused", bad, back.searchParams.get("iss") as string)
    expect(refused.status).toBe(400)
    expect(logs.lines.filter((l) => l.includes("the SDK says")), JSON.stringify(refused.body)).toEqual([expect.stringContaining('the SDK says: OAuth "invalid_grant"')])
    expect(warned.mock.calls.filter((c) => String(c[0]).includes("[mcp-sdk]"))).toEqual([])
  })

  it("still does when console.warn was replaced after the store routed it (a spy copies the replaced function's properties)", { timeout: 30_000 }, async () => {
    // The tests above ran OAuth steps: the store's console.warn is in front now; a spy replaces it.
    const later = vi.spyOn(console, "warn").mockImplementation(() => undefined)
    try {
      await add("replaced")
      const back = await approve("replaced")
      const bad = new URL(back)
      bad.searchParams.set("code", "not-a-code")
      const before = logs.lines.length
      expect((await paste("replaced", bad, back.searchParams.get("iss") as string)).status).toBe(400)
      expect(logs.lines.slice(before).filter((l) => l.includes("the SDK says"))).toEqual([expect.stringContaining('OAuth of store/replaced: the SDK says: OAuth "invalid_grant"')])
      expect(later.mock.calls.filter((c) => String(c[0]).includes("[mcp-sdk]"))).toEqual([])
    } finally {
      later.mockRestore()
    }
  })
})
