// connect() against servers of the SDK v2 (test/fixtures/era-*.ts): the era probe, the modern era on
// the wire (envelope, headers, no session), results with resultType, input_required answered through
// the call's relay (or declined without one), on resource reads and prompts too (and a 2025 server's
// requests during them), a missing resource as each era answers it,
// subscriptions/listen, a remembered era, pins and version mismatches; and the 2025 servers as before.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { connect, eraSuspect } from "../../src/mcp/connect.js"
import type { McpConnection, UpstreamRequestRelay } from "../../src/mcp/types.js"
import type { ResolvedDefinition } from "../../src/domain/service-definition.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture } from "../fixtures/http-fixture.js"
import { eraStdio, stdioFixture } from "../fixtures/paths.js"
import { eventually, failureOf, localDef, remoteDef, T, textOf } from "../support/index.js"

const pinned = (def: ResolvedDefinition, version: "2026-07-28" | "2025-11-25" | "2025-06-18"): ResolvedDefinition => ({ ...def, protocolVersion: version })

describe("a modern-only server over Streamable HTTP", () => {
  let fixture: EraHttpFixture
  let conn: McpConnection

  beforeAll(async () => {
    fixture = await startEraHttpFixture()
    conn = await connect(remoteDef(fixture.url), T)
  })
  afterAll(async () => {
    await conn.close()
    await fixture.stop()
  })

  it("is spoken to in the 2026-07-28 era after one server/discover, with the modern headers and no session", async () => {
    expect(conn.protocolVersion).toBe("2026-07-28")
    expect(conn.era?.kind).toBe("modern")
    expect(conn.serverInfo).toEqual({ name: "era-fixture", version: "2.0.0" })
    expect(fixture.requests()[0]).toBe("POST server/discover")
    expect(fixture.requests()).not.toContain("POST initialize")
    expect((await conn.listTools(T)).map((t) => t.name)).toEqual(expect.arrayContaining(["echo", "add", "count", "sleep", "add_tool", "confirm"]))
    expect(textOf(await conn.callTool("echo", { text: "modern" }, T))).toBe("modern")
    const i = fixture.requests().lastIndexOf("POST tools/call")
    expect(fixture.headers()[i]).toEqual({ method: "tools/call", name: "echo", version: "2026-07-28", session: undefined, region: undefined })
    expect(fixture.requests()).not.toContain("GET")
    expect(fixture.requests()).not.toContain("POST notifications/initialized")
  })

  it("mirrors x-mcp-header parameters into Mcp-Param headers, and encodes names that are not plain ASCII", async () => {
    expect(textOf(await conn.callTool("region", { region: "Zürich", query: "weather" }, T))).toBe("weather in Zürich")
    const i = fixture.requests().lastIndexOf("POST tools/call")
    expect(fixture.headers()[i]?.region).toBe(`=?base64?${Buffer.from("Zürich").toString("base64")}?=`)
    expect(textOf(await conn.callTool("region", { region: "eu-west", query: "q" }, T))).toBe("q in eu-west")
    expect(fixture.headers()[fixture.requests().lastIndexOf("POST tools/call")]?.region).toBe("eu-west")
  })

  it("returns structured content without resultType, and hears progress", async () => {
    const result = await conn.callTool("add", { a: 2, b: 3 }, T)
    expect(result.structuredContent).toEqual({ sum: 5 })
    expect(result).not.toHaveProperty("resultType")
    // The server's identity on every result (the era's own `_meta` key) is the connection's, not the result's.
    expect(result).not.toHaveProperty("_meta")
    const progress: Array<number> = []
    const counted = await conn.callTool("count", { steps: 3, delay_ms: 20 }, { ...T, hooks: { onProgress: (p) => void progress.push(p.progress) } })
    expect(textOf(counted)).toBe("counted 3")
    expect(progress).toEqual([1, 2, 3])
  })

  it("answers an input_required result through the call's relay, round after round, echoing the server's state", async () => {
    const asked: Array<{ method: string; message: unknown }> = []
    const relay: UpstreamRequestRelay = async (request) => {
      asked.push({ method: request.method, message: request.params?.["message"] })
      return { action: "accept", content: { ok: true } }
    }
    const before = fixture.requests().filter((r) => r === "POST tools/call").length
    expect(textOf(await conn.callTool("confirm", { rounds: 2 }, { ...T, hooks: { relay } }))).toBe("confirmed 2")
    expect(asked).toEqual([
      { method: "elicitation/create", message: "Proceed (round 1)?" },
      { method: "elicitation/create", message: "Proceed (round 2)?" }
    ])
    // The first request and one retry per round.
    expect(fixture.requests().filter((r) => r === "POST tools/call").length - before).toBe(3)
    // An answer that declines is the server's to handle.
    expect(textOf(await conn.callTool("confirm", {}, { ...T, hooks: { relay: async () => ({ action: "decline" }) } }))).toBe("round 1: decline")
  })

  it("declines an input_required result when the call's caller cannot answer, and fails a relay's malformed answer", async () => {
    const failure = await failureOf(conn.callTool("confirm", {}, T))
    expect(failure.kind).toBe("protocol")
    expect(failure.message).toMatch(/declined elicitation\/create: the caller of this tool call cannot answer it/)
    const refused = await failureOf(conn.callTool("confirm", {}, { ...T, hooks: { relay: async () => Promise.reject(new Error("the user is away")) } }))
    expect(refused.message).toContain("the user is away")
    const malformed = await failureOf(conn.callTool("confirm", {}, { ...T, hooks: { relay: async () => ({ action: "maybe" }) } }))
    expect(malformed.message).toMatch(/Invalid elicitation result/)
  })

  it("answers input_required on a resource read and a prompt through their relay; a missing resource is -32602 with its URI", async () => {
    const asked: Array<unknown> = []
    const relay: UpstreamRequestRelay = async (request) => {
      asked.push(request.params?.["message"])
      return request.params?.["message"] === "Your name?" ? { action: "accept", content: { name: "Ada" } } : { action: "accept", content: { ok: true } }
    }
    const read = await conn.readResource("mem://locked", { ...T, hooks: { relay } })
    expect(read.contents).toEqual([{ uri: "mem://locked", mimeType: "text/plain", text: "the locked note" }])
    expect(read).not.toHaveProperty("resultType")
    const prompt = await conn.getPrompt("greet", {}, { ...T, hooks: { relay } })
    expect(prompt.messages).toEqual([{ role: "user", content: { type: "text", text: "Hello, Ada" } }])
    expect(asked).toEqual(["Read mem://locked?", "Your name?"])
    const declined = await failureOf(conn.readResource("mem://locked", T))
    expect(declined.message).toMatch(/declined elicitation\/create: the caller of this resource read cannot answer it/)
    const missing = await failureOf(conn.readResource("mem://notes/missing", T))
    expect(missing).toMatchObject({ kind: "protocol", code: -32602, data: { uri: "mem://notes/missing" } })
    expect((await conn.readResource("mem://notes/7", T)).contents).toEqual([{ uri: "mem://notes/7", mimeType: "text/plain", text: "note 7" }])
  })

  it("bounds the time a relay may take by the call's time-out", async () => {
    const never = () => new Promise<Record<string, unknown>>(() => undefined)
    const failure = await failureOf(conn.callTool("confirm", {}, { timeoutMs: 300, hooks: { relay: never } }))
    expect(failure.kind).toBe("timeout")
  })

  it("times out and cancels by closing the request's stream (no notifications/cancelled posted)", async () => {
    const failure = await failureOf(conn.callTool("sleep", { ms: 5_000 }, { timeoutMs: 300 }))
    expect(failure.kind).toBe("timeout")
    expect(await eventually(() => fixture.notes().includes("cancelled sleep"), 5_000)).toBe(true)
    expect(fixture.requests()).not.toContain("POST notifications/cancelled")
  })

  it("checks health with server/discover (the era has no ping)", async () => {
    expect(await conn.ping(T)).toBeGreaterThan(0)
    expect(fixture.requests().at(-1)).toBe("POST server/discover")
    expect(fixture.requests()).not.toContain("POST ping")
  })

  it("hears a tool list change through subscriptions/listen", async () => {
    expect(fixture.requests()).toContain("POST subscriptions/listen")
    let changed = 0
    const off = conn.onToolsChanged(() => void changed++)
    await conn.callTool("add_tool", { name: "late" }, T)
    expect(await eventually(() => changed > 0, 5_000)).toBe(true)
    off()
    expect((await conn.listTools(T)).map((t) => t.name)).toContain("late")
  })

  it("subscribes to a resource through subscriptions/listen (the era has no resources/subscribe)", async () => {
    expect(conn.capabilities.subscribe).toBe(true)
    const updated: Array<string> = []
    const off = conn.onResourceUpdated((uri) => void updated.push(uri))
    await conn.subscribeResource("mem://note", T)
    // The listen stream is opened again with the resource in its filter.
    expect(await eventually(() => fixture.requests().filter((r) => r === "POST subscriptions/listen").length >= 2, 5_000)).toBe(true)
    // Touched until the new stream (acknowledged in its own time) carries the update.
    expect(await eventually(async () => (await conn.callTool("touch", {}, T), updated.includes("mem://note")), 5_000)).toBe(true)
    await conn.unsubscribeResource("mem://note", T)
    off()
    expect(fixture.requests()).not.toContain("POST resources/subscribe")
  })

  it("sends the log level with every request (the era has no logging/setLevel), and hears the log messages", async () => {
    const said: Array<unknown> = []
    const off = conn.onLogMessage((m) => void said.push(m.data))
    await conn.callTool("say", { text: "unheard" }, T)
    expect(conn.logging).toBe(true)
    await conn.setLoggingLevel("info", T)
    await conn.callTool("say", { text: "heard" }, T)
    expect(await eventually(() => said.includes("heard"), 5_000)).toBe(true)
    expect(said).not.toContain("unheard")
    expect(fixture.requests()).not.toContain("POST logging/setLevel")
    off()
  })

  it("reconnects with the remembered era: no probe", async () => {
    const before = fixture.requests().length
    const again = await connect(remoteDef(fixture.url), { ...T, prior: conn.era })
    try {
      expect(again.protocolVersion).toBe("2026-07-28")
      expect(fixture.requests().slice(before).filter((r) => r === "POST server/discover" || r === "POST initialize")).toEqual([])
    } finally {
      await again.close()
    }
  })
})

describe("era pins and mismatches", () => {
  let modern: EraHttpFixture
  let dual: EraHttpFixture
  beforeAll(async () => {
    modern = await startEraHttpFixture()
    dual = await startEraHttpFixture({ legacy: "stateless" })
  })
  afterAll(async () => {
    await modern.stop()
    await dual.stop()
  })

  it("a 2025 pin on a modern-only server is a permanent failure naming both sides", async () => {
    const failure = await failureOf(connect(pinned(remoteDef(modern.url), "2025-06-18"), T))
    expect(failure.permanent).toBe(true)
    expect(failure.message).toMatch(/protocol version mismatch/)
    expect(failure.hint).toContain("2026-07-28")
    expect(failure.hint).toContain("2025-06-18")
  })

  it("a dual-era server is spoken to in the modern era, and in the 2025 era when pinned", async () => {
    const auto = await connect(remoteDef(dual.url), T)
    const old = await connect(pinned(remoteDef(dual.url), "2025-11-25"), T)
    try {
      expect(auto.protocolVersion).toBe("2026-07-28")
      expect(old.protocolVersion).toBe("2025-11-25")
      expect(old.era?.kind).toBe("legacy")
      expect(textOf(await old.callTool("echo", { text: "old" }, T))).toBe("old")
    } finally {
      await auto.close()
      await old.close()
    }
  })

  it("a 2026-07-28 pin on a 2025 server is a permanent failure", async () => {
    const old = await startHttpFixture()
    try {
      const failure = await failureOf(connect(pinned(remoteDef(old.url), "2026-07-28"), T))
      expect(failure.permanent).toBe(true)
      expect(failure.hint).toMatch(/2025-era.*"protocol_version": "2026-07-28"/)
    } finally {
      await old.stop()
    }
  })
})

describe("the lists' ttlMs (connection.listTtlMs)", () => {
  it("a modern server's, per list, the catalog's the least of its lists'; the SDK's default 0; a 2025 server's none", async () => {
    const hinted = await startEraHttpFixture({
      cacheHints: {
        "tools/list": { ttlMs: 300_000, cacheScope: "public" },
        "resources/list": { ttlMs: 60_000 },
        "resources/templates/list": { ttlMs: 120_000 },
        "prompts/list": { ttlMs: 90_000 }
      }
    })
    const plain = await startEraHttpFixture()
    const old = await startHttpFixture({ server: { catalog: true } })
    const conns: Array<McpConnection> = []
    try {
      const listed = async (url: string) => {
        const conn = await connect(remoteDef(url), T)
        conns.push(conn)
        expect(conn.listTtlMs).toBeUndefined()
        await conn.listTools(T)
        await conn.listCatalog(T)
        return conn.listTtlMs
      }
      expect(await listed(hinted.url)).toEqual({ tools: 300_000, catalog: 60_000 })
      expect(await listed(plain.url)).toEqual({ tools: 0, catalog: 0 })
      expect(await listed(old.url)).toEqual({ tools: undefined, catalog: undefined })
    } finally {
      await Promise.all(conns.map((c) => c.close()))
      await Promise.all([hinted.stop(), plain.stop(), old.stop()])
    }
  })
})

describe("a 2025 server", () => {
  it("over Streamable HTTP: the probe falls back to initialize, and the remembered era skips the probe", async () => {
    const old = await startHttpFixture()
    try {
      const conn = await connect(remoteDef(old.url), T)
      expect(conn.protocolVersion).toBe("2025-11-25")
      expect(old.requests().slice(0, 2)).toEqual(["POST server/discover", "POST initialize"])
      const prior = conn.era
      await conn.close()
      const before = old.requests().length
      const again = await connect(remoteDef(old.url), { ...T, prior })
      expect(old.requests()[before]).toBe("POST initialize")
      expect(textOf(await again.callTool("echo", { text: "x" }, T))).toBe("x")
      await again.close()
    } finally {
      await old.stop()
    }
  })

  it("its requests during a resource read or a prompt go to their relay; a missing resource is -32002 with its URI", async () => {
    const old = await startHttpFixture({ server: { catalog: true } })
    const conn = await connect(remoteDef(old.url), T)
    try {
      const relay: UpstreamRequestRelay = async (request) =>
        request.params?.["message"] === "Your name?" ? { action: "accept", content: { name: "Grace" } } : { action: "decline" }
      expect((await conn.readResource("mem://locked", { ...T, hooks: { relay } })).contents[0]).toMatchObject({ text: "not read: decline" })
      expect((await conn.getPrompt("greet", {}, { ...T, hooks: { relay } })).messages[0]?.content).toEqual({ type: "text", text: "Hello, Grace" })
      const declined = await failureOf(conn.readResource("mem://locked", T))
      expect(declined.message).toMatch(/declined elicitation\/create: it is not tied to a tool call, resource read or prompt request in flight/)
      const missing = await failureOf(conn.readResource("mem://notes/missing", T))
      expect(missing).toMatchObject({ kind: "protocol", code: -32002, data: { uri: "mem://notes/missing" } })
    } finally {
      await conn.close()
      await old.stop()
    }
  })

  it("a stale modern verdict fails the first request in a way the owner re-negotiates on", async () => {
    const old = await startHttpFixture()
    try {
      const stale = { kind: "modern", version: "2026-07-28", discover: { supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, serverInfo: undefined } } as const
      const conn = await connect(remoteDef(old.url), { ...T, prior: stale })
      const failure = await failureOf(conn.listTools(T))
      await conn.close()
      expect(eraSuspect(failure)).toBe(true)
      const fresh = await connect(remoteDef(old.url), T)
      expect(fresh.protocolVersion).toBe("2025-11-25")
      await fresh.close()
    } finally {
      await old.stop()
    }
  })

  it("over stdio: the probe is refused, initialize follows on the same process", async () => {
    const conn = await connect(localDef(stdioFixture()), T)
    try {
      expect(conn.protocolVersion).toBe("2025-11-25")
      expect(textOf(await conn.callTool("echo", { text: "stdio" }, T))).toBe("stdio")
    } finally {
      await conn.close()
    }
  })
})

describe("a modern-only server over stdio", () => {
  let dir: string
  let conn: McpConnection | undefined
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "era-stdio-"))
  })
  afterEach(async () => {
    await conn?.close()
    conn = undefined
  })
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  const methods = (log: string): Array<string> => readFileSync(log, "utf8").split("\n").filter((l) => l !== "")

  it("is spoken to in the 2026-07-28 era: calls, progress, time-outs, tool list changes", async () => {
    const log = join(dir, "a.log")
    conn = await connect(localDef(eraStdio("reject", log)), T)
    expect(conn.protocolVersion).toBe("2026-07-28")
    expect(methods(log)[0]).toBe("server/discover")
    expect(textOf(await conn.callTool("echo", { text: "stdio" }, T))).toBe("stdio")
    expect((await conn.callTool("add", { a: 1, b: 1 }, T)).structuredContent).toEqual({ sum: 2 })
    const progress: Array<number> = []
    await conn.callTool("count", { steps: 2, delay_ms: 10 }, { ...T, hooks: { onProgress: (p) => void progress.push(p.progress) } })
    expect(progress).toEqual([1, 2])
    const failure = await failureOf(conn.callTool("sleep", { ms: 5_000 }, { timeoutMs: 300 }))
    expect(failure.kind).toBe("timeout")
    expect(await eventually(() => methods(log).includes("cancelled sleep"), 5_000)).toBe(true)
    expect(methods(log)).toContain("notifications/cancelled")
    expect(await conn.ping(T)).toBeGreaterThan(0)
    let changed = 0
    conn.onToolsChanged(() => void changed++)
    await conn.callTool("add_tool", { name: "late" }, T)
    expect(await eventually(() => changed > 0, 5_000)).toBe(true)
    const updated: Array<string> = []
    conn.onResourceUpdated((uri) => void updated.push(uri))
    await conn.subscribeResource("mem://note", T)
    expect(await eventually(() => methods(log).filter((m) => m === "subscriptions/listen").length >= 2, 5_000)).toBe(true)
    expect(await eventually(async () => (await conn!.callTool("touch", {}, T), updated.includes("mem://note")), 5_000)).toBe(true)
    expect(methods(log)).not.toContain("initialize")
    expect(methods(log)).not.toContain("resources/subscribe")
  })

  it("a dual-era server over stdio speaks the modern era; pinned to 2025 it speaks that", async () => {
    conn = await connect(localDef(eraStdio("serve")), T)
    expect(conn.protocolVersion).toBe("2026-07-28")
    await conn.close()
    conn = await connect(pinned(localDef(eraStdio("serve")), "2025-11-25"), T)
    expect(conn.protocolVersion).toBe("2025-11-25")
    expect(textOf(await conn.callTool("echo", { text: "old" }, T))).toBe("old")
  })

  it("a pinned server that exits at start fails as a process that exited, not as a version mismatch", async () => {
    const failure = await failureOf(connect(pinned(localDef(stdioFixture("--exit-immediately")), "2026-07-28"), T))
    expect(failure.kind).toBe("transport")
    expect(failure.message).not.toMatch(/mismatch/)
    expect(failure.message).toMatch(/exited with code 3/)
  })

  it("a 2025 pin on a modern-only stdio server is a permanent failure naming both sides", async () => {
    const failure = await failureOf(connect(pinned(localDef(eraStdio("reject")), "2025-11-25"), T))
    expect(failure.permanent).toBe(true)
    expect(failure.hint).toContain("2026-07-28")
    expect(failure.hint).toContain("2025-11-25")
  })
})
