// Every client era against every upstream era and transport, through one store's /mcp. Three clients
// (the SDK v2 client pinned to 2026-07-28, the SDK v2 client in `auto` mode, the SDK 1.x client in a
// 2025 session) against six upstreams registered in one store: three flavours (a modern-only SDK v2
// server, a dual-era SDK v2 server, an SDK 1.x server), each over stdio and over Streamable HTTP. Real
// processes and sockets throughout: the store in the test's process, the stdio servers its children,
// the HTTP servers on loopback; one store and one fixture per upstream for the whole file.
//
// Connect: every upstream is healthy in its era (2026-07-28 for both SDK v2 flavours: the store asks
// server/discover first, so a dual-era server is reached in the modern era too; 2025-11-25 for the 1.x
// ones), and every client is connected in its own (2026-07-28 for both v2 clients, `auto` included,
// since the store answers server/discover; a session for 1.x).
//
// Each of the 18 cells (client × upstream; the six cells of a client run at once, each on its own
// upstream): the upstream's tools are listed; a call answers; structured content arrives equal to the
// upstream's ({sum: 42}, beside its text); a call with a progress token hears the upstream's steps
// (sent 1, 2, 3 of 3, 20 ms apart) starting at 1 and increasing: the store keeps only the latest
// progress while one is being sent (src/runtime/progress.ts), so a busy loop may skip a step, which is
// why the cell does not demand all three; an elicitation crosses the store (the upstream asks mid-call
// in its own era, input_required for a 2026-07-28 server or elicitation/create for a 2025 one, the
// client answers in its own, and the answer's content is in the result) and the call is recorded once;
// a call the client cancels once the upstream has it is cancelled upstream (a 2026-07-28 tool sees its
// signal abort: a closed stream over HTTP, notifications/cancelled over stdio; a 2025 server receives
// notifications/cancelled) and recorded `cancelled`. Change notification, per cell: a tool added on
// each upstream in turn is announced to every client in its own era (notifications/tools/list_changed
// on a 2025 session, or on a 2026-07-28 client's subscriptions/listen stream) and then listed. Logs: a
// 2026-07-28 call whose `_meta` asks for log messages gets the called service's on its own stream; one
// that does not, none.
//
// The MCP Inspector's CLI (@modelcontextprotocol/inspector-cli, a client the project did not write: SDK
// 1.x, one 2025 session per command, no client capabilities) is a fourth client: it lists every
// upstream's tools and calls each upstream's structured tool, and a call that needs input it cannot
// give (it declares no elicitation) is answered with a tool error saying so. Being one command per
// request, it has no progress, cancellation or change notification to test.
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eraStdio } from "../fixtures/paths.js"
import { eventually, fixtureService, inspectorProgram, localService, startTestServer, within, type TestServer } from "../support/index.js"

const CLIENTS = ["v2 pinned to 2026-07-28", "v2 auto", "1.x (2025 session)"] as const
type ClientKind = (typeof CLIENTS)[number]
/** The upstreams, as the store names them: flavour and transport. */
const UPSTREAMS = ["modern-http", "dual-http", "legacy-http", "modern-stdio", "dual-stdio", "legacy-stdio"] as const

/** What the tools of a flavour are called and answer (era-server.ts for SDK v2, fixture-server.ts for 1.x). */
const FLAVOURS = {
  v2: {
    era: "2026-07-28",
    structured: "add",
    progress: { tool: "count", args: { steps: 3, delay_ms: 20 } },
    ask: "confirm",
    answered: "confirmed 1"
  },
  v1: {
    era: "2025-11-25",
    structured: "sum",
    progress: { tool: "progress", args: { count: 3, every: 20 } },
    ask: "ask",
    answered: "names: matrix"
  }
} as const

/** An upstream as the cells see it: its service name, flavour, and what reached it. */
interface Upstream {
  readonly name: string
  readonly flavour: (typeof FLAVOURS)[keyof typeof FLAVOURS]
  /** How many tools/call requests it has received. */
  calls(): number
  /** How many cancellations it has seen (a sleep that noted it was cancelled, or notifications/cancelled received). */
  cancellations(): number
}

/** The MCP Inspector's CLI (its bundle: test/support/programs.ts): one request per command, its result printed as JSON. */
const inspector = async (url: string, ...args: ReadonlyArray<string>): Promise<{ code: number; out: string; err: string }> => {
  const cli = await inspectorProgram()
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, url, ...args], { timeout: 20_000 }, (error, out, err) =>
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, out, err })
    )
  })
}

/** The answer every client gives to an elicitation: accept, with both fixtures' fields. */
const ANSWER = { action: "accept", content: { ok: true, name: "matrix" } } as const

const count = (lines: ReadonlyArray<string>, line: string): number => lines.filter((l) => l === line).length
const fileLines = (file: string): Array<string> => {
  try {
    return readFileSync(file, "utf8").split("\n")
  } catch {
    return []
  }
}

describe("every client era against every upstream era and transport, through /mcp", { timeout: 30_000 }, () => {
  let server: TestServer
  let modern: EraHttpFixture
  let dual: EraHttpFixture
  let legacy: HttpFixture
  let dir: string
  const log = (name: string) => join(dir, `${name}.log`)
  const upstreams: Array<Upstream> = []

  /** A client as the cells use it: the SDK 1.x and v2 clients, each called its own way. */
  interface CellClient {
    callTool(
      params: { name: string; arguments: Record<string, unknown> },
      options?: { signal?: AbortSignal; onprogress?: (p: { progress: number }) => void }
    ): Promise<{ content?: unknown; structuredContent?: unknown; isError?: boolean }>
    listTools(): Promise<{ tools: Array<{ name: string }> }>
    close(): Promise<void>
    /** How many tool list changes the client has heard (through its era's channel). */
    changes(): number
    /** The era it connected in: "modern" (2026-07-28), or "session" (a 2025 session id). */
    era(): string | undefined
  }
  const clients = new Map<ClientKind, CellClient>()

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "era-matrix-"))
    ;[modern, dual, legacy, server] = await Promise.all([
      startEraHttpFixture(),
      startEraHttpFixture({ legacy: "stateless" }),
      startHttpFixture({ server: { elicitTool: true, progressTool: true, structuredTool: true } }),
      // No health checks during the file (every 0.5 s by default here): the matrix does not test monitoring, and six upstreams checked twice a second cost CPU.
      // New tools are taken at once: the test adds one upstream on purpose (held by default: test/extras/tool-pins.test.ts).
      startTestServer({ monitoring: { health_check_seconds: 60 }, options: { pin_new_tools: "accept" } })
    ])
    const added = await server.post("/for_store/add_service?wait=15", [
      { name: "modern-http", url: modern.url },
      { name: "dual-http", url: dual.url },
      { name: "legacy-http", url: legacy.url },
      localService("modern-stdio", eraStdio("reject", log("modern-stdio"))),
      localService("dual-stdio", eraStdio("serve", log("dual-stdio"))),
      fixtureService("legacy-stdio", "--elicit-tool", "--progress-tool", "--structured-tool", "--log", log("legacy-stdio"))
    ])
    expect(added.body.services.map((s: { name: string; status: string }) => `${s.name} ${s.status}`)).toEqual(UPSTREAMS.map((name) => `${name} healthy`))
    const posts = (fixture: { requests(): ReadonlyArray<string> }, line: string) => () => count(fixture.requests(), line)
    const logged = (name: string, line: string) => () => count(fileLines(log(name)), line)
    upstreams.push(
      { name: "modern-http", flavour: FLAVOURS.v2, calls: posts(modern, "POST tools/call"), cancellations: () => count(modern.notes(), "cancelled sleep") },
      { name: "dual-http", flavour: FLAVOURS.v2, calls: posts(dual, "POST tools/call"), cancellations: () => count(dual.notes(), "cancelled sleep") },
      { name: "legacy-http", flavour: FLAVOURS.v1, calls: posts(legacy, "POST tools/call"), cancellations: posts(legacy, "POST notifications/cancelled") },
      { name: "modern-stdio", flavour: FLAVOURS.v2, calls: logged("modern-stdio", "tools/call"), cancellations: logged("modern-stdio", "cancelled sleep") },
      { name: "dual-stdio", flavour: FLAVOURS.v2, calls: logged("dual-stdio", "tools/call"), cancellations: logged("dual-stdio", "cancelled sleep") },
      { name: "legacy-stdio", flavour: FLAVOURS.v1, calls: logged("legacy-stdio", "tools/call"), cancellations: logged("legacy-stdio", "notifications/cancelled") }
    )

    const url = new URL(`${server.url}/mcp`)
    const connect = async (kind: ClientKind): Promise<void> => {
      if (kind === "1.x (2025 session)") {
        const client = new ClientV1({ name: "matrix-1x", version: "1.0.0" }, { capabilities: { elicitation: {} } })
        client.setRequestHandler(ElicitRequestSchema, async () => ANSWER)
        let changes = 0
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => void (changes += 1))
        const transport = new TransportV1(url)
        await within(client.connect(transport), 10_000, "connect 1.x")
        clients.set(kind, {
          callTool: (params, options = {}) => client.callTool(params, undefined, options) as never,
          listTools: () => client.listTools(),
          close: () => client.close(),
          changes: () => changes,
          era: () => (transport.sessionId !== undefined ? "session" : undefined)
        })
      } else {
        const mode = kind === "v2 auto" ? "auto" : { pin: "2026-07-28" }
        const client = new Client({ name: "matrix-v2", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode } })
        client.onerror = () => undefined
        client.setRequestHandler("elicitation/create", async () => ANSWER as never)
        let changes = 0
        client.setNotificationHandler("notifications/tools/list_changed", () => void (changes += 1))
        await within(client.connect(new StreamableHTTPClientTransport(url)), 10_000, `connect ${kind}`)
        // A 2026-07-28 client hears of changes on a listen stream (in `auto` mode too: the store answers server/discover).
        const listening = await within(client.listen({ toolsListChanged: true }), 5000, `listen ${kind}`)
        clients.set(kind, {
          callTool: (params, options = {}) => client.callTool(params, options) as never,
          listTools: () => client.listTools({}, { cacheMode: "bypass" }) as never,
          close: async () => {
            await listening.close()
            await client.close()
          },
          changes: () => changes,
          era: () => (client.getProtocolEra() === "modern" ? `modern ${client.getNegotiatedProtocolVersion()}` : client.getProtocolEra())
        })
      }
    }
    await Promise.all(CLIENTS.map(connect))
  }, 60_000)
  afterAll(async () => {
    await Promise.all([...clients.values()].map((c) => within(c.close(), 3000, "close").catch(() => undefined)))
    await server?.cleanup()
    await Promise.all([modern?.stop(), dual?.stop(), legacy?.stop()])
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
  })

  const text = (result: { content?: unknown }) => (result.content as Array<{ text?: string }> | undefined)?.[0]?.text
  const records = async (tool: string, service: string) =>
    (await server.get(`/for_store/tool_records?tool_name=${tool}&service_name=${service}&limit=1000`)).body.executions as Array<{ outcome: string }>

  it("connect: each upstream is healthy in its era, each client connected in its own", async () => {
    const listed = (await server.get("/for_store/list_services")).body.services as Array<{ name: string; protocol_version: string | null }>
    expect(Object.fromEntries(listed.map((s) => [s.name, s.protocol_version]))).toEqual(Object.fromEntries(upstreams.map((u) => [u.name, u.flavour.era])))
    expect(Object.fromEntries(CLIENTS.map((kind) => [kind, clients.get(kind)!.era()]))).toEqual({
      "v2 pinned to 2026-07-28": "modern 2026-07-28",
      "v2 auto": "modern 2026-07-28",
      "1.x (2025 session)": "session"
    })
  })

  it("a 2026-07-28 call that asks for log messages in its _meta hears the called service's, on its own stream", async () => {
    const client = new Client({ name: "matrix-logs", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    const heard: Array<{ data: unknown; logger?: string }> = []
    client.setNotificationHandler("notifications/message", (n) => void heard.push(n.params as { data: unknown; logger?: string }))
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect")
    try {
      await client.callTool({ name: "modern-http__say", arguments: { text: "unheard" } })
      const said = await client.callTool({ name: "modern-http__say", arguments: { text: "heard" }, _meta: { "io.modelcontextprotocol/logLevel": "info" } })
      expect(text(said)).toBe("said")
      expect(await eventually(() => heard.some((m) => m.data === "heard"), 5000)).toBe(true)
      expect(heard.find((m) => m.data === "heard")?.logger).toBe("modern-http")
      expect(heard.some((m) => m.data === "unheard")).toBe(false)
    } finally {
      await client.close()
    }
  })

  it("change notification, per cell: a tool added on each upstream in turn is announced to every client in its own era, then listed", async () => {
    // One upstream at a time: the store announces a change once its list has it, so a change heard is this upstream's.
    for (const u of upstreams) {
      const heard = new Map(CLIENTS.map((kind) => [kind, clients.get(kind)!.changes()]))
      const added = await server.post("/for_store/call_tool", { tool_name: `${u.name}__add_tool`, args: { name: "late" } })
      expect(added.body.is_error, u.name).toBe(false)
      await Promise.all(
        CLIENTS.map(async (kind) => {
          const c = clients.get(kind)!
          expect(await eventually(() => c.changes() > heard.get(kind)!, 5000), `${kind} hears of ${u.name}__late`).toBe(true)
          expect((await c.listTools()).tools.map((t) => t.name), `${kind} lists ${u.name}__late`).toContain(`${u.name}__late`)
        })
      )
    }
  })

  it("MCP Inspector CLI (a 2025 session per command, no capabilities): every upstream's tools listed, each structured tool called, input it cannot give declined", async () => {
    const url = `${server.url}/mcp`
    const listed = await inspector(url, "--method", "tools/list")
    expect(listed.err, "tools/list: stderr").toBe("")
    const names = (JSON.parse(listed.out) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)
    for (const u of upstreams) expect(names, `Inspector lists ${u.name}'s tools`).toEqual(expect.arrayContaining([`${u.name}__echo`, `${u.name}__${u.flavour.structured}`]))
    await Promise.all(
      upstreams.map(async (u) => {
        const called = await inspector(url, "--method", "tools/call", "--tool-name", `${u.name}__${u.flavour.structured}`, "--tool-arg", "a=20", "b=22")
        expect(called.code, `Inspector → ${u.name}: exit code (${called.err})`).toBe(0)
        const result = JSON.parse(called.out) as { structuredContent?: unknown; content?: unknown; isError?: boolean }
        expect(result.structuredContent, `Inspector → ${u.name}: structured content`).toEqual({ sum: 42 })
        expect(text(result), `Inspector → ${u.name}: its text`).toBe("42")
      })
    )
    // A modern upstream's input_required and a 2025 upstream's elicitation/create alike: the client cannot answer.
    await Promise.all(
      [upstreams[0]!, upstreams[2]!].map(async (u) => {
        const asked = await inspector(url, "--method", "tools/call", "--tool-name", `${u.name}__${u.flavour.ask}`)
        expect(asked.code, `Inspector → ${u.name}__${u.flavour.ask}: exit code (${asked.err})`).toBe(0)
        const result = JSON.parse(asked.out) as { content?: unknown; isError?: boolean }
        expect(result.isError, `Inspector → ${u.name}__${u.flavour.ask}: a tool error`).toBe(true)
        expect(text(result), `Inspector → ${u.name}__${u.flavour.ask}: why`).toMatch(/declined elicitation\/create: the MCP client that made this call did not declare the elicitation capability/)
      })
    )
  })

  /** One cell: what a client does with one upstream, assertions labelled with the cell. */
  const runCell = async (kind: ClientKind, u: Upstream): Promise<void> => {
    const c = clients.get(kind)!
    const cell = `${kind} → ${u.name}`
    const { flavour } = u

    const names = (await within(c.listTools(), 5000, `${cell}: tools/list`)).tools.map((t) => t.name)
    expect(names, `${cell}: listed`).toEqual(expect.arrayContaining(["echo", flavour.structured, flavour.progress.tool, flavour.ask, "sleep"].map((t) => `${u.name}__${t}`)))

    const echoed = await within(c.callTool({ name: `${u.name}__echo`, arguments: { text: cell } }), 10_000, `${cell}: echo`)
    expect(text(echoed), `${cell}: called`).toBe(cell)

    const sum = await within(c.callTool({ name: `${u.name}__${flavour.structured}`, arguments: { a: 20, b: 22 } }), 10_000, `${cell}: structured`)
    expect(sum.structuredContent, `${cell}: structured content`).toEqual({ sum: 42 })
    expect(text(sum), `${cell}: structured content's text`).toBe("42")

    // The upstream sends 1, 2, 3 of 3; the store may skip a step (see the top comment), never the first, never go back.
    const progress: Array<{ progress: number; total?: number }> = []
    const counted = await within(
      c.callTool({ name: `${u.name}__${flavour.progress.tool}`, arguments: flavour.progress.args }, { onprogress: (p) => void progress.push(p) }),
      10_000,
      `${cell}: progress`
    )
    expect(counted.isError ?? false, `${cell}: progress call`).toBe(false)
    const steps = progress.map((p) => p.progress)
    expect(steps[0], `${cell}: the first progress heard`).toBe(1)
    expect(steps, `${cell}: progress increasing, up to the total`).toEqual([...new Set(steps)].sort((a, b) => a - b).filter((s) => s <= 3))
    expect(progress.map((p) => p.total), `${cell}: progress totals`).toEqual(steps.map(() => 3))

    const asked = await within(records(flavour.ask, u.name), 5000, `${cell}: records`)
    const answered = await within(c.callTool({ name: `${u.name}__${flavour.ask}`, arguments: {} }), 15_000, `${cell}: the call that asks`)
    expect(answered.isError ?? false, `${cell}: elicitation`).toBe(false)
    expect(text(answered), `${cell}: elicitation answered`).toBe(flavour.answered)
    expect((await records(flavour.ask, u.name)).length - asked.length, `${cell}: the call that asked, recorded once`).toBe(1)

    // Cancelled once the upstream has the call (its tools/call arrived), not before it is sent.
    const calls = u.calls()
    const cancellations = u.cancellations()
    const cancelledRecords = (await records("sleep", u.name)).filter((r) => r.outcome === "cancelled").length
    const abort = new AbortController()
    const sleeping = c.callTool({ name: `${u.name}__sleep`, arguments: { ms: 10_000 } }, { signal: abort.signal })
    sleeping.catch(() => undefined)
    expect(await eventually(() => u.calls() > calls, 5000), `${cell}: the call to cancel reached the upstream`).toBe(true)
    abort.abort()
    await expect(within(sleeping, 5000, `${cell}: the cancelled call`), `${cell}: the cancelled call rejects`).rejects.not.toThrow(/timed out/)
    expect(await eventually(() => u.cancellations() === cancellations + 1, 5000), `${cell}: cancelled upstream`).toBe(true)
    expect(
      await eventually(async () => (await records("sleep", u.name)).filter((r) => r.outcome === "cancelled").length === cancelledRecords + 1, 5000),
      `${cell}: recorded cancelled`
    ).toBe(true)
  }

  // The six cells of a client run at once (each on its own upstream), started by the first of them to run.
  const started = new Map<ClientKind, Map<string, Promise<void>>>()
  const cellOf = (kind: ClientKind, name: string): Promise<void> => {
    let cells = started.get(kind)
    if (cells === undefined) {
      cells = new Map(
        upstreams.map((u) => {
          const run = runCell(kind, u)
          run.catch(() => undefined) // awaited by its own test
          return [u.name, run] as const
        })
      )
      started.set(kind, cells)
    }
    return cells.get(name)!
  }

  for (const kind of CLIENTS) {
    for (const name of UPSTREAMS) {
      it(`${kind} → ${name}: listed, called, structured content, progress, an elicitation crosses, a cancelled call is cancelled upstream`, async () => {
        await cellOf(kind, name)
      })
    }
  }
})
