// The stdio transport on real processes: environment, stderr ring, spawn failures, and that no
// process of the child's group survives close() or the child's own end.
import { afterEach, describe, expect, it, vi } from "vitest"
import { LineRing, StdioProcessTransport } from "../../src/mcp/stdio.js"
import { liveGroupMembers, processGone } from "../support/index.js"

const open: Array<StdioProcessTransport> = []
const track = (transport: StdioProcessTransport): StdioProcessTransport => {
  open.push(transport)
  return transport
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.close()))
})

/** A node one-liner as a transport. */
const node = (code: string, extra: Partial<ConstructorParameters<typeof StdioProcessTransport>[0]> = {}) =>
  track(new StdioProcessTransport({ command: process.execPath, args: ["-e", code], ...extra }))

describe("LineRing", () => {
  it("splits chunks into lines, holds a partial line, and keeps only the last lines", () => {
    const ring = new LineRing(3)
    ring.push("a\nb")
    expect(ring.lines()).toEqual(["a", "b"])
    ring.push("c\r\nd\ne\nf")
    expect(ring.lines()).toEqual(["d", "e", "f"])
    ring.end()
    expect(ring.lines()).toEqual(["d", "e", "f"])
    ring.push("\n")
    expect(ring.lines()).toEqual(["e", "f", ""])
  })

  it("a flood of lines keeps the last ones, in order, across chunks and a partial line", () => {
    const ring = new LineRing(200)
    for (let chunk = 0; chunk < 20; chunk++) ring.push(Array.from({ length: 5_000 }, (_, i) => `${chunk}:${i}`).join("\n") + "\n")
    const lines = ring.lines()
    expect(lines).toHaveLength(200)
    expect(lines[0]).toBe("19:4800")
    expect(lines.at(-1)).toBe("19:4999")
    ring.push("tail")
    expect(ring.lines().at(-1)).toBe("tail")
    expect(ring.lines()[0]).toBe("19:4801")
    expect(ring.lines()).toHaveLength(200)
  })
})

describe("StdioProcessTransport", () => {
  it("gives the child PATH and HOME plus the definition's env, and nothing else of ours", async () => {
    process.env["MCP_STORE_TEST_SECRET"] = "leak"
    try {
      const transport = node(
        "console.error(JSON.stringify({ path: !!process.env.PATH, home: process.env.HOME, foo: process.env.FOO, secret: process.env.MCP_STORE_TEST_SECRET ?? null }))",
        { env: { FOO: "bar" } }
      )
      const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
      await transport.start()
      await closed
      expect(JSON.parse(transport.stderrTail().at(-1) ?? "{}")).toEqual({
        path: true,
        home: process.env["HOME"],
        foo: "bar",
        secret: null
      })
      expect(transport.exit).toEqual({ kind: "exited", code: 0, signal: null })
    } finally {
      delete process.env["MCP_STORE_TEST_SECRET"]
    }
  })

  it("runs in the given working directory", async () => {
    const transport = node("console.error(process.cwd())", { cwd: "/tmp" })
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
    await transport.start()
    await closed
    expect(transport.stderrTail()).toEqual(["/tmp"])
  })

  it("keeps only the last 200 stderr lines, the partial last line included", async () => {
    const transport = node(
      "for (let i = 1; i <= 250; i++) process.stderr.write('line ' + i + '\\n'); process.stderr.write('partial')"
    )
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
    await transport.start()
    await closed
    const tail = transport.stderrTail()
    expect(tail).toHaveLength(200)
    expect(tail[0]).toBe("line 52")
    expect(tail.at(-2)).toBe("line 250")
    expect(tail.at(-1)).toBe("partial")
  })

  it("reports a command that does not exist through onerror and onclose, and start() rejects", async () => {
    const transport = track(new StdioProcessTransport({ command: "mcp-store-no-such-command" }))
    const errors: Array<Error> = []
    transport.onerror = (error) => errors.push(error)
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
    await expect(transport.start()).rejects.toThrow(/ENOENT/)
    await closed
    expect(errors.map((e) => e.message).join()).toMatch(/ENOENT/)
    expect(transport.exit?.kind).toBe("spawn_failed")
    await transport.close()
  })

  it("names a spawn option Node refuses without quoting its value (an environment value may be a secret)", async () => {
    const cases: Array<[Partial<ConstructorParameters<typeof StdioProcessTransport>[0]>, RegExp]> = [
      [{ env: { A: "top\0secret" } }, /the option options\.env\['A'\] was refused/],
      [{ args: ["-e", "1", "x\0secret"] }, /the option args\[2\] was refused/],
      [{ cwd: "/tmp\0secret" }, /the option options\.cwd was refused/]
    ]
    for (const [extra, named] of cases) {
      const transport = node("1", extra)
      const errors: Array<Error> = []
      transport.onerror = (error) => errors.push(error)
      const started = await transport.start().then(() => undefined, (e: Error) => e)
      expect(started?.message).toMatch(named)
      expect(started?.message).not.toContain("secret")
      expect(errors.map((e) => e.message).join()).not.toContain("secret")
      expect(transport.exit?.kind === "spawn_failed" ? transport.exit.error.message : "").not.toContain("secret")
    }
  })

  it("names a missing working directory instead of a misleading ENOENT for the command", async () => {
    const transport = node("1", { cwd: "/no/such/dir" })
    transport.onerror = () => {}
    await expect(transport.start()).rejects.toThrow(/working directory \/no\/such\/dir does not exist/)
  })

  it("close() ends the whole group, even a grandchild that ignores SIGTERM, and never throws", async () => {
    const transport = node(
      [
        "const { spawn } = require('node:child_process');",
        // The grandchild says "ready" once its SIGTERM handler is installed; only then is its pid announced.
        "const g = spawn(process.execPath, ['-e', \"process.on('SIGTERM', () => {}); process.stdout.write('ready'); setInterval(() => {}, 1e9)\"], { stdio: ['ignore', 'pipe', 'ignore'] });",
        "g.stdout.once('data', () => console.error('grandchild ' + g.pid));",
        "setInterval(() => {}, 1e9)"
      ].join("\n"),
      { graceMs: 5_000 }
    )
    await transport.start()
    await vi.waitFor(() => expect(transport.stderrTail().join()).toMatch(/grandchild \d+/), { timeout: 5_000 })
    const grandchild = Number(/grandchild (\d+)/.exec(transport.stderrTail().join())?.[1])
    const pid = transport.pid ?? 0
    const started = performance.now()
    await transport.close()
    // The direct child ends at once on SIGTERM; the straggler is killed then, not after the grace period.
    expect(performance.now() - started).toBeLessThan(2_000)
    expect(processGone(pid)).toBe(true)
    await vi.waitFor(() => expect(processGone(grandchild)).toBe(true), { timeout: 1_000 })
    expect(liveGroupMembers(pid)).toEqual([])
    await transport.close()
  })

  it("SIGKILLs a child that ignores SIGTERM after the grace period", async () => {
    const transport = node("process.on('SIGTERM', () => {}); console.error('ready'); setInterval(() => {}, 1e9)", {
      graceMs: 300
    })
    await transport.start()
    await vi.waitFor(() => expect(transport.stderrTail()).toContain("ready"), { timeout: 5_000 })
    const started = performance.now()
    await transport.close()
    expect(performance.now() - started).toBeGreaterThanOrEqual(250)
    expect(transport.exit).toMatchObject({ kind: "exited", signal: "SIGKILL" })
    expect(processGone(transport.pid ?? 0)).toBe(true)
  })

  it("ends the rest of the group when the child exits by itself", async () => {
    const transport = node(
      [
        "const { spawn } = require('node:child_process');",
        "const g = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e9)'], { stdio: 'ignore' });",
        "console.error('grandchild ' + g.pid);",
        "setTimeout(() => process.exit(5), 300)"
      ].join("\n")
    )
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
    await transport.start()
    await closed
    expect(transport.exit).toEqual({ kind: "exited", code: 5, signal: null })
    const grandchild = Number(/grandchild (\d+)/.exec(transport.stderrTail().join())?.[1])
    await vi.waitFor(() => expect(processGone(grandchild)).toBe(true), { timeout: 3_000 })
    expect(liveGroupMembers(transport.pid ?? 0)).toEqual([])
  })

  it("refuses to send once the process has exited", async () => {
    const transport = node("process.exit(0)")
    const closed = new Promise<void>((resolve) => (transport.onclose = resolve))
    await transport.start()
    await closed
    await expect(transport.send({ jsonrpc: "2.0", method: "ping", id: 1 })).rejects.toThrow(/Not connected.*exited with code 0/)
  })
})
