// The pool of per-user connections (src/runtime/user-credentials.ts) on real connections to the HTTP
// fixture: bounded per service (the least recently used idle one closed first, TOO_MANY when all are
// in use), an idle one closed by its timer, a changed credential's closed at once (here, with other
// values at the next use, or on a change heard from another replica), and nothing left open after
// closeAll; a connection held by a subscription is not closed idle, never makes room for another
// principal (TOO_MANY instead) and tells its hold why it closed, also when it closed by itself (a
// local process killed); holds take at most max - 1 connections (subscribes in flight counted, no
// longer once cancelled while their connection opens; none with a bound of 1, a refusal that names
// no time to wait); a hold released while its request runs hears the connection it ran on; refusals are one warn line a minute per service, the next counting those
// since; a removal that fails half-way (a store that fails once, as Redis away does) ends, asked
// again, where one that worked would have. Credentials kept in memory (the encrypted file is covered
// over HTTP, Redis by test/config/redis-credentials.test.ts).
import { Exit } from "effect"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { CredentialsFile, type CredentialStore } from "../../src/config/credentials-file.js"
import { ClusterUnavailable } from "../../src/domain/errors.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { captureLogs } from "../../src/logging/log.js"
import { McpRequestError } from "../../src/mcp/types.js"
import { ConnectionRegistry, openPrincipalConnection } from "../../src/runtime/adapter.js"
import { ConnectionHold, UserCredentials } from "../../src/runtime/user-credentials.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, fixtureService, quietFor, within } from "../support/index.js"

const values = (who: string) => ({ headers: { Authorization: `Bearer ${who}-token` }, env: {} })

describe("per-user connection pool", () => {
  let fixture: HttpFixture
  const registry = new ConnectionRegistry()
  let pool: UserCredentials
  let target: { scope: typeof STORE_SCOPE; name: string; definition: { url: string; per_user: { headers: string[] } } }
  /** A pool of real connections to the fixture, each tracked in `registry`, with these bounds. */
  const poolOf = (limits: { maxConnections: number; idleMs: number }, store: CredentialStore = CredentialsFile.inMemory()) =>
    new UserCredentials(
      Promise.resolve(store),
      (t, v, timeoutMs, signal) => openPrincipalConnection(registry, t, v, { clientName: "pool-test", timeoutMs, signal }),
      (c) => registry.close(c),
      limits
    )

  beforeAll(async () => {
    fixture = await startHttpFixture({ server: { whoamiTool: true } })
    target = { scope: STORE_SCOPE, name: "remote", definition: { url: fixture.url, per_user: { headers: ["Authorization"] } } }
    pool = poolOf({ maxConnections: 2, idleMs: 300 })
  })
  afterAll(async () => {
    await pool.closeAll()
    await registry.closeAll()
    await fixture.stop()
  })

  /** The fixture's `whoami` through `who`'s pooled connection. */
  const whoami = async (who: string, hold?: Promise<void>) => {
    const exit = await pool.request(target, who, values(who), { remaining: () => 5_000 }, async (c) => {
      const result = await c.callTool("whoami", {}, { timeoutMs: 5_000 })
      await hold
      return JSON.parse((result.content[0] as { text: string }).text) as { authorization: string }
    })
    return Exit.isSuccess(exit) ? exit.value.authorization : exit
  }

  it("keeps at most two principals' connections: the least recently used idle one is closed first", async () => {
    expect(await whoami("a")).toBe("Bearer a-token")
    expect(await whoami("b")).toBe("Bearer b-token")
    expect(await whoami("a")).toBe("Bearer a-token") // b is now the least recently used
    expect(await whoami("c")).toBe("Bearer c-token")
    expect(pool.size).toBe(2)
    expect(await eventually(() => registry.size === 2, 2_000)).toBe(true)
  })

  it("refuses TOO_MANY when every connection is in use, and closes idle ones by their timer", async () => {
    let release = () => undefined as void
    const held = new Promise<void>((resolve) => (release = resolve))
    const first = whoami("a", held)
    const second = whoami("c", held)
    const third = await whoami("d")
    expect(Exit.isExit(third) && Exit.isFailure(third) && JSON.stringify(third.cause)).toContain("per_user_connections")
    release()
    expect([await first, await second]).toEqual(["Bearer a-token", "Bearer c-token"])
    expect(await eventually(() => pool.size === 0 && registry.size === 0, 3_000)).toBe(true)
  })

  it("a changed credential closes the principal's connection; the next call uses the new one", async () => {
    expect(await whoami("a")).toBe("Bearer a-token")
    await pool.set(STORE_SCOPE, "remote", "a", { headers: { Authorization: "Bearer new" }, env: {} })
    expect(pool.size).toBe(0)
    const exit = await pool.request(target, "a", { headers: { Authorization: "Bearer new" }, env: {} }, { remaining: () => 5_000 }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
    expect(Exit.isSuccess(exit) && JSON.stringify(exit.value)).toContain("Bearer new")
    await pool.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("a connection opened with other values is replaced at its next use; a change heard from another replica closes it at once, unless it was opened with the credential held now", async () => {
    const listeners = new Set<(service: string, principal: string | undefined) => void>()
    const shared: CredentialStore = Object.assign(CredentialsFile.inMemory(), {
      onChange: (listener: (service: string, principal: string | undefined) => void) => {
        listeners.add(listener)
        return () => void listeners.delete(listener)
      }
    })
    const local = poolOf({ maxConnections: 2, idleMs: 60_000 }, shared)
    const ask = async (values: { headers: Record<string, string>; env: Record<string, string> }) => {
      const exit = await local.request(target, "x", values, { remaining: () => 5_000 }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
      return Exit.isSuccess(exit) ? JSON.parse((exit.value.content[0] as { text: string }).text).authorization : exit
    }
    expect(await ask(values("x"))).toBe("Bearer x-token")
    // Read after another replica changed it: the old connection is not used.
    expect(await ask({ headers: { Authorization: "Bearer changed" }, env: {} })).toBe("Bearer changed")
    expect(local.size).toBe(1)
    expect(await eventually(() => registry.size === 1, 2_000)).toBe(true)
    await eventually(() => listeners.size === 1, 1_000)
    // The change heard late, after the connection was opened with the credential held now: it stays.
    await shared.put("store/remote", "x", { headers: { Authorization: "Bearer changed" }, env: {} })
    for (const listener of listeners) listener("store/remote", "x")
    await quietFor(300)
    expect(local.size).toBe(1)
    expect(registry.size).toBe(1)
    // Changed again there: closed at once.
    await shared.put("store/remote", "x", { headers: { Authorization: "Bearer newer" }, env: {} })
    for (const listener of listeners) listener("store/remote", "x")
    expect(await eventually(() => local.size === 0 && registry.size === 0, 2_000)).toBe(true)
    await local.closeAll()
    expect(listeners.size).toBe(0)
  })

  it("a change heard while the credential cannot be read (Redis away) takes the connection out of the pool, but the call under way on it ends with its answer; then it closes", async () => {
    const listeners = new Set<(service: string, principal: string | undefined) => void>()
    let unreadable = false
    const memory = CredentialsFile.inMemory()
    const shared: CredentialStore = Object.assign(memory, {
      find: (service: string, principal: string) => (unreadable ? Promise.reject(new ClusterUnavailable({ message: "reading a per-user credential: Redis does not answer" })) : CredentialsFile.prototype.find.call(memory, service, principal)),
      onChange: (listener: (service: string, principal: string | undefined) => void) => {
        listeners.add(listener)
        return () => void listeners.delete(listener)
      }
    })
    const local = poolOf({ maxConnections: 2, idleMs: 60_000 }, shared)
    await eventually(() => listeners.size === 1, 1_000)
    let release = () => undefined as void
    const held = new Promise<void>((resolve) => (release = resolve))
    let started = () => undefined as void
    const running = new Promise<void>((resolve) => (started = resolve))
    const call = local.request(target, "y", values("y"), { remaining: () => 5_000 }, async (c) => {
      started()
      await held
      return c.callTool("whoami", {}, { timeoutMs: 5_000 })
    })
    await running
    expect(local.size).toBe(1)
    unreadable = true
    for (const listener of listeners) listener("store/remote", "y")
    // Out of the pool at once, the connection still open under the call.
    expect(await eventually(() => local.size === 0, 2_000)).toBe(true)
    expect(registry.size).toBeGreaterThanOrEqual(1)
    release()
    const exit = await call
    expect(Exit.isSuccess(exit) && JSON.parse((exit.value.content[0] as { text: string }).text).authorization).toBe("Bearer y-token")
    // Closed once the call ended.
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
    await local.closeAll()
  })

  it("with room for one principal, the next one's connection replaces the idle one (still owned by the pool)", async () => {
    const single = poolOf({ maxConnections: 1, idleMs: 60_000 })
    for (const who of ["a", "b"]) {
      const exit = await single.request(target, who, values(who), { remaining: () => 5_000 }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
      expect(Exit.isSuccess(exit) && JSON.stringify(exit.value)).toContain(`Bearer ${who}-token`)
    }
    expect(single.size).toBe(1)
    await single.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("a held connection (a subscription's) is not closed idle, never makes room for another principal (refused TOO_MANY instead), and tells its hold why it closed", async () => {
    const held = poolOf({ maxConnections: 3, idleMs: 200 })
    const told: Array<{ who: string; why: string; again: boolean }> = []
    const holdOf = (who: string) => new ConnectionHold((why, again) => void told.push({ who, why, again }))
    const request = (who: string, hold?: ConnectionHold) =>
      held.request(target, who, values(who), { remaining: () => 5_000, hold }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
    const ask = async (who: string, hold?: ConnectionHold) => expect(Exit.isSuccess(await request(who, hold)), who).toBe(true)
    const a = holdOf("a")
    await ask("a", a)
    await ask("b")
    await ask("c")
    // x needs room: b goes, idle and unheld, though a is the least recently used.
    await ask("x")
    expect(told).toEqual([])
    // x and c close idle; a, held, stays open well past its idle time (four idle periods).
    expect(await eventually(() => held.size === 1, 2_000)).toBe(true)
    await quietFor(800)
    expect(held.size).toBe(1)
    // A second holder, c; then e needs room while x's call is in flight: a and c are held, x in use, so e is refused, and none is closed.
    await ask("c", holdOf("c"))
    let finish: (() => void) | undefined
    const busy = held.request(target, "x", values("x"), { remaining: () => 5_000 }, () => new Promise<void>((resolve) => (finish = resolve)))
    expect(await eventually(() => finish !== undefined, 5_000), "x's request runs").toBe(true)
    const refused = await request("e")
    expect(Exit.isFailure(refused) && JSON.stringify(refused.cause)).toContain("per_user_connections")
    expect(held.size).toBe(3)
    expect(told).toEqual([])
    finish!()
    expect(Exit.isSuccess(await busy)).toBe(true)
    // A changed credential closes c's connection: its hold is told, to subscribe again on the next one.
    await held.set(STORE_SCOPE, "remote", "c", values("c2"))
    expect(told).toEqual([expect.objectContaining({ who: "c", again: true })])
    expect(told[0]!.why).toContain("credential changed")
    // Released holds let their connections close idle again.
    const e = holdOf("e")
    await ask("e", e)
    e.release()
    a.release()
    expect(await eventually(() => held.size === 0, 2_000)).toBe(true)
    expect(told).toHaveLength(1)
    await held.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("holds take at most max - 1 connections: a subscribe that would hold the last one is refused TOO_MANY, a plain request still gets it; with a bound of 1, no connection is held at all", async () => {
    const held = poolOf({ maxConnections: 3, idleMs: 60_000 })
    const holdOf = () => new ConnectionHold(() => undefined)
    const request = (pool: UserCredentials, who: string, hold?: ConnectionHold) =>
      pool.request(target, who, values(who), { remaining: () => 5_000, hold }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
    expect(Exit.isSuccess(await request(held, "a", holdOf()))).toBe(true)
    // b's and c's subscribes at once: b's, in flight, counts as held, so c's would hold the last connection and is refused before any is opened.
    const [b, c] = await Promise.all([request(held, "b", holdOf()), request(held, "c", holdOf())])
    expect(Exit.isSuccess(b)).toBe(true)
    expect(Exit.isFailure(c) && JSON.stringify(c.cause)).toContain("2 of its 3 principals' connections held by resource subscriptions")
    expect(held.size).toBe(2)
    // A plain request gets the last one; a's second subscription shares its held connection.
    expect(Exit.isSuccess(await request(held, "c"))).toBe(true)
    expect(Exit.isSuccess(await request(held, "a", holdOf()))).toBe(true)
    await held.closeAll()
    const single = poolOf({ maxConnections: 1, idleMs: 60_000 })
    const none = await request(single, "a", holdOf())
    expect(Exit.isFailure(none) && JSON.stringify(none.cause)).toContain("resource subscriptions need --per-user-connections of at least 2")
    // Trying again cannot help: no time to wait is named (the faces render retry_after_seconds null).
    expect(Exit.isFailure(none) && JSON.stringify(none.cause)).toContain(`"retryAfterSeconds":null`)
    expect(single.size).toBe(0)
    expect(Exit.isSuccess(await request(single, "a"))).toBe(true)
    await single.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("a subscribe cancelled while its principal's connection opens stops waiting for it, and no longer counts as held", async () => {
    // "slow"'s connection never opens (until the pool closes it); the others' are real.
    const opening = new UserCredentials(
      Promise.resolve(CredentialsFile.inMemory()),
      (t, v, timeoutMs, signal, principal) =>
        principal === "slow"
          ? new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(new McpRequestError("aborted", "closed while opening")), { once: true }))
          : openPrincipalConnection(registry, t, v, { clientName: "pool-test", timeoutMs, signal }),
      (c) => registry.close(c),
      { maxConnections: 2, idleMs: 60_000 }
    )
    const gone = new AbortController()
    const waiting = opening.request(target, "slow", values("slow"), { remaining: () => 5_000, hold: new ConnectionHold(() => undefined), signal: gone.signal }, async () => undefined)
    gone.abort()
    const cancelled = await within(waiting, 2_000, "the cancelled subscribe ends")
    expect(Exit.isFailure(cancelled) && JSON.stringify(cancelled.cause)).toContain("aborted")
    // One connection may be held of two: b's subscribe gets it, "slow"'s no longer counted.
    const b = await opening.request(target, "b", values("b"), { remaining: () => 5_000, hold: new ConnectionHold(() => undefined) }, (c) => c.callTool("whoami", {}, { timeoutMs: 5_000 }))
    expect(Exit.isSuccess(b), JSON.stringify(b)).toBe(true)
    await opening.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("a hold released while its request runs is not held: it hears the connection the request succeeded on, to undo what it did there", async () => {
    const held = poolOf({ maxConnections: 2, idleMs: 200 })
    const unwanted: Array<unknown> = []
    const hold = new ConnectionHold(() => undefined, (c) => void unwanted.push(c))
    let finish: (() => void) | undefined
    let ranOn: unknown
    const running = held.request(target, "a", values("a"), { remaining: () => 5_000, hold }, (c) => {
      ranOn = c
      return new Promise<void>((resolve) => (finish = resolve))
    })
    expect(await eventually(() => finish !== undefined, 5_000), "a's request runs").toBe(true)
    hold.release()
    finish!()
    expect(Exit.isSuccess(await running)).toBe(true)
    expect(unwanted).toHaveLength(1)
    expect(unwanted[0]).toBe(ranOn)
    // Not held: it closes idle.
    expect(await eventually(() => held.size === 0, 2_000)).toBe(true)
    await held.closeAll()
  })

  it("a service whose connections are all in use: one warn line for its refusals, the next a minute later at most, saying how many were refused since", async () => {
    const single = poolOf({ maxConnections: 1, idleMs: 60_000 })
    const logs = captureLogs({ level: "warning" })
    let finish: (() => void) | undefined
    try {
      const busy = single.request(target, "a", values("a"), { remaining: () => 5_000 }, () => new Promise<void>((resolve) => (finish = resolve)))
      expect(await eventually(() => finish !== undefined, 5_000), "a's request runs").toBe(true)
      const refuse = () => single.request(target, "b", values("b"), { remaining: () => 5_000 }, async () => undefined)
      for (let i = 0; i < 3; i++) expect(Exit.isFailure(await refuse())).toBe(true)
      const lines = () => logs.lines.filter((l) => l.includes("per-user connection of service 'remote'"))
      expect(lines()).toHaveLength(1)
      // A minute later (the pool reads the clock as it refuses, before any await).
      const now = performance.now.bind(performance)
      const later = vi.spyOn(performance, "now").mockImplementation(() => now() + 61_000)
      const fourth = refuse()
      later.mockRestore()
      expect(Exit.isFailure(await fourth)).toBe(true)
      expect(lines()).toHaveLength(2)
      expect(lines()[1]).toContain("(2 more refused since the last such line)")
      finish!()
      expect(Exit.isSuccess(await busy)).toBe(true)
    } finally {
      logs.restore()
      await single.closeAll()
    }
  })

  it("a principal's connection that closes by itself (its process exited) leaves the pool at once, its hold told to subscribe again", async () => {
    const local = { scope: STORE_SCOPE, name: "local", definition: { ...fixtureService("local"), per_user: { env: ["FIXTURE_USER"] } } }
    const held = poolOf({ maxConnections: 2, idleMs: 60_000 })
    const told: Array<{ why: string; again: boolean }> = []
    const exit = await held.request(local, "p", { headers: {}, env: { FIXTURE_USER: "p" } }, { remaining: () => 10_000, hold: new ConnectionHold((why, again) => void told.push({ why, again })) }, async (c) => c.pid)
    const pid = Exit.isSuccess(exit) ? exit.value : undefined
    expect(pid).toBeGreaterThan(0)
    expect(held.size).toBe(1)
    process.kill(pid!, "SIGKILL")
    expect(await eventually(() => told.length === 1 && held.size === 0, 5_000), JSON.stringify(told)).toBe(true)
    expect(told[0]).toMatchObject({ again: true })
    expect(told[0]!.why).toContain("closed by itself")
    await held.closeAll()
    expect(await eventually(() => registry.size === 0, 2_000)).toBe(true)
  })

  it("a DELETE that fails half-way (Redis lost between its two parts) is asked again and ends as one that succeeded: nothing left, answered 'deleted'", async () => {
    // Each part fails once, as Redis away fails it (ClusterUnavailable), then works: the principal's
    // tokens (the OAuth manager's part) and its credential (the credential store's).
    const cases = [
      { failing: "tokens", hasTokens: false },
      { failing: "tokens", hasTokens: true },
      { failing: "credential", hasTokens: true }
    ] as const
    for (const { failing, hasTokens } of cases) {
      const label = `${failing} failing, tokens held: ${hasTokens}`
      const store = CredentialsFile.inMemory()
      const tokens = new Set(hasTokens ? ["x"] : [])
      let fail = true
      const away = () => {
        fail = false
        return Promise.reject(new ClusterUnavailable({ message: "the cluster's Redis does not answer" }))
      }
      const flaky: CredentialStore = Object.assign(Object.create(store) as CredentialsFile, {
        remove: (service: string, principal: string) => (failing === "credential" && fail ? away() : store.remove(service, principal))
      })
      const authorizations = {
        hasToken: (_s: unknown, _n: string, principal: string) => tokens.has(principal),
        readPrincipal: async () => undefined,
        forgetPrincipal: (_s: unknown, _n: string, principal: string) => (failing === "tokens" && fail ? away() : Promise.resolve(tokens.delete(principal)))
      }
      const credentials = new UserCredentials(Promise.resolve(flaky), () => Promise.reject(new Error("not opened here")), async () => undefined, undefined, authorizations)
      await credentials.set(STORE_SCOPE, "remote", "x", values("x"))
      await expect(credentials.remove(STORE_SCOPE, "remote", "x"), label).rejects.toBeInstanceOf(ClusterUnavailable)
      // Asked again: it finds what is left and removes it, answering as a removal that worked at once.
      expect(await credentials.remove(STORE_SCOPE, "remote", "x"), label).toBe(true)
      expect({ label, credential: await credentials.find(STORE_SCOPE, "remote", "x"), tokens: tokens.size }).toEqual({ label, credential: undefined, tokens: 0 })
      // A third time: nothing to remove.
      expect(await credentials.remove(STORE_SCOPE, "remote", "x"), label).toBe(false)
    }
  })
})
