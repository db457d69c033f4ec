/**
 * One logger, lifecycle lines: every status change of a service is one line at
 * its level, in text or JSON; Effect's log lines and the lines of code outside Effect look alike;
 * a hostile upstream cannot forge lines; `--log-format` is checked like every option; the program
 * (a child process) writes its banner and lifecycle lines as JSON with `--log-format json`.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { main } from "../../src/main.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { captureLogs, formatLine, log, type CapturedLogs } from "../../src/logging/log.js"
import { runToPromise } from "../../src/runtime/run.js"
import { eventually, fixtureService, spawnStore, startTestServer, type StoreProcess, type TestServer } from "../support/index.js"

describe("the logger", () => {
  let captured: CapturedLogs | undefined
  afterEach(() => captured?.restore())

  it("writes Effect's lines and the lines of code outside Effect in one text style", async () => {
    captured = captureLogs({ level: "info" })
    await runToPromise(Effect.logWarning("from Effect").pipe(Effect.annotateLogs({ service: "store/x" })))
    log.info("from a callback", { service: "store/x" })
    await runToPromise(Effect.logDebug("below the level"))
    log.debug("below the level too")
    expect(captured.lines).toHaveLength(2)
    expect(captured.lines[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARN  from Effect$/)
    expect(captured.lines[1]).toMatch(/^\S+Z INFO  from a callback$/)
  })

  it("writes one JSON object a line, annotations and fields as keys", async () => {
    captured = captureLogs({ level: "debug", format: "json" })
    await runToPromise(Effect.logError("boom").pipe(Effect.annotateLogs({ service: "store/x", attempt: 2 })))
    log.warn("careful", { service: "agent-1/files", hint: "do this" })
    const [a, b] = captured.lines.map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(a).toMatchObject({ level: "error", message: "boom", service: "store/x", attempt: 2 })
    expect(typeof a?.time).toBe("string")
    expect(b).toMatchObject({ level: "warn", message: "careful", service: "agent-1/files", hint: "do this" })
  })

  it("escapes control characters in text, so a hostile upstream cannot forge a line, and bounds the length", () => {
    captured = captureLogs({ level: "info" })
    log.warn("store/evil reconnecting: bad\n2026-01-01T00:00:00.000Z ERROR forged\r\u001b[31m")
    log.info("x".repeat(10_000))
    expect(captured.lines).toHaveLength(2)
    expect(captured.lines[0]).toContain("bad\\n2026-01-01T00:00:00.000Z ERROR forged\\r\\u001b[31m")
    expect(captured.lines[1]!.length).toBeLessThan(4_200)
    expect(formatLine("info", "a\nb", undefined, new Date(0))).toBe("1970-01-01T00:00:00.000Z INFO  a\\nb\n")
  })
})

describe("lifecycle lines of a running store", () => {
  let server: TestServer
  let captured: CapturedLogs

  beforeAll(async () => {
    captured = captureLogs({ level: "debug" })
    server = await startTestServer({ monitoring: { unreachable_retry_seconds: 3600 } })
  })
  afterAll(async () => {
    await server?.cleanup()
    captured?.restore()
  })

  const lineFor = (pattern: RegExp) => eventually(() => captured.lines.some((l) => pattern.test(l)), 15_000)

  it("logs healthy with the tool count and the time it took", async () => {
    expect((await server.post("/for_store/add_service?wait=20", fixtureService("fx"))).body.connected).toEqual(["fx"])
    expect(await lineFor(/ INFO  store\/fx healthy \(\d+ tools, [\d.]+ m?s\)$/)).toBe(true)
  })

  it("logs a reconnecting line with the attempt and the next delay when the process is killed (kill -9)", async () => {
    const actor = server.running.store.serviceActor(STORE_SCOPE, "fx")!
    const pid = actor.getSnapshot().context.connection?.pid
    expect(pid).toBeGreaterThan(0)
    process.kill(pid!, "SIGKILL")
    expect(await lineFor(/ WARN  store\/fx reconnecting: transport closed: the process .*\(attempt 1, next in [\d.]+ m?s\)$/)).toBe(true)
    // And it comes back, which is a line too.
    expect(await lineFor(/ INFO  store\/fx healthy again \(\d+ tools, down [\d.]+ m?s\)$/)).toBe(true)
  })

  it("logs a permanent failure as ERROR unreachable with its hint, and a removal", async () => {
    await server.post("/for_store/add_service?wait=10", { name: "ghost", command: "no-such-cmd-mcp-store" })
    const pattern = / ERROR store\/ghost unreachable \(permanent failure\): .*ENOENT \(hint: executable "no-such-cmd-mcp-store" not found on the store's PATH: .*\); next try in 3600 s$/
    expect(await lineFor(pattern)).toBe(true)
    expect((await server.del("/for_store/delete_service/ghost")).status).toBe(200)
    expect(await lineFor(/ INFO  store\/ghost removed$/)).toBe(true)
  })
})

describe("the program's options", () => {
  it("refuses --log-format bogus with exit code 2 and a clear message", async () => {
    const errors: string[] = []
    const write = process.stderr.write
    process.stderr.write = ((chunk: string) => {
      errors.push(String(chunk))
      return true
    }) as typeof process.stderr.write
    try {
      expect(await main(["run", "api", "--log-format", "bogus"])).toBe(2)
    } finally {
      process.stderr.write = write
    }
    expect(errors.join("")).toContain('--log-format: log_format must be one of text, json (got "bogus")')
  })
})

describe("mcp-store run api --log-format json (a child process)", () => {
  let store: StoreProcess | undefined
  let dir = ""
  afterAll(async () => {
    await store?.kill()
    if (dir !== "") rmSync(dir, { recursive: true, force: true })
  })

  it("writes the banner and the lifecycle lines as JSON objects, one a line", async () => {
    dir = mkdtempSync(join(tmpdir(), "mcp-store-log-"))
    const file = join(dir, "mcp.json")
    writeFileSync(file, JSON.stringify({ mcpServers: { ghost: { command: "no-such-cmd-mcp-store" } } }))
    store = await spawnStore({ configFile: file, extraArgs: ["--startup-info", "--log-level", "info", "--log-format", "json"], startTimeoutMs: 60_000 })
    const lines = () =>
      store!
        .output()
        .split("\n")
        .filter((l) => l.trim() !== "")
    const objects = () => lines().map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(await eventually(() => objects().some((o) => o.event === "status" && o.service === "store/ghost"), 30_000)).toBe(true)
    const banner = objects().find((o) => o.event === "started")
    expect(banner).toMatchObject({ level: "info", url: store.url, docs: `${store.url}/docs`, ui: `${store.url}/ui`, mcp: `${store.url}/mcp`, metrics: `${store.url}/metrics` })
    const ghost = objects().find((o) => o.event === "status" && o.service === "store/ghost")
    expect(ghost).toMatchObject({ level: "error", to: "unreachable", permanent: true })
    expect(String(ghost?.hint)).toContain("not found on the store's PATH")
  }, 90_000)
})
