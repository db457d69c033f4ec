// Local servers that start grandchildren (the stdio fixture's --spawn-grandchild, also with a
// grandchild that ignores SIGTERM): after delete, disconnect, restart, the server's shutdown, or the
// server process dying by itself, no live process of its process group is left. Members are counted
// from /proc, zombies ignored (this machine's init does not reap orphans, so a killed grandchild may
// stay a zombie for ever).
//
// The tests run at the same time (describe.concurrent). Those of a variant that end one service
// each (delete, disconnect, restart, SIGKILL) share one store, each with a service of its own (its
// own name, its own process group: each checks only the groups of its own servers), ended after
// the variant; the shutdown test, which ends its store, and the agent test have stores of their own.
import { afterAll, describe, expect, it, type TestContext } from "vitest"
import {
  eventually,
  FAULT_MONITORING,
  firstText,
  fixtureService,
  groupRunning,
  killGroup,
  liveGroupMembers,
  processGroupOf,
  recordStatuses,
  startTestServer,
  type TestServer
} from "../support/index.js"

/** A test's own store (when it has one) and the process groups it saw. */
interface Own {
  server?: TestServer
  readonly groups: Set<number>
}

/** A test's own resources, ended when it finishes (its own hook: the tests run at the same time). */
const own = ({ onTestFinished }: TestContext): Own => {
  const o: Own = { groups: new Set() }
  onTestFinished(async () => {
    await o.server?.cleanup()
    for (const pgid of o.groups) killGroup(pgid) // only when a test failed half-way
  }, 20_000)
  return o
}

/** A store started on first use and shared by the tests of a describe, ended after them. */
const sharedStore = (): (() => Promise<TestServer>) => {
  let started: Promise<TestServer> | undefined
  afterAll(async () => {
    await (await started?.catch(() => undefined))?.cleanup()
  }, 20_000)
  return () => (started ??= startTestServer({ monitoring: FAULT_MONITORING }))
}

const VARIANTS: ReadonlyArray<[string, ReadonlyArray<string>]> = [
  ["a grandchild", ["--spawn-grandchild"]],
  ["a grandchild that ignores SIGTERM", ["--spawn-grandchild", "--grandchild-ignores-sigterm"]]
]

/**
 * Adds the fixture as service `name` to `server` (the test's own store when `server` is not given);
 * returns the store, the process group (the server's pid) and the grandchild's pid.
 */
const start = async (o: Own, flags: ReadonlyArray<string>, name = "gc", shared?: TestServer) => {
  const server = shared ?? (o.server = await startTestServer({ monitoring: FAULT_MONITORING }))
  const added = await server.post("/for_store/add_service?wait=15", fixtureService(name, ...flags))
  expect(added.body.services[0].status).toBe("healthy")
  return { server, ...(await tree(o, server, name)) }
}

/** The live server's pid (its group id) and its grandchild's pid, asked through the store. */
const tree = async (o: Own, server: TestServer, name = "gc") => {
  const pid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: `${name}__pid` })).body.content))
  const grandchild = Number(firstText((await server.post("/for_store/call_tool", { tool_name: `${name}__grandchild_pid` })).body.content))
  o.groups.add(pid)
  // The server leads its own group; the grandchild stays in it.
  expect(processGroupOf(pid)).toBe(pid)
  expect(processGroupOf(grandchild)).toBe(pid)
  expect(liveGroupMembers(pid).sort()).toEqual([pid, grandchild].sort())
  return { pgid: pid, grandchild }
}

describe.concurrent.each(VARIANTS)("a local server with %s", (_label, flags) => {
  const store = sharedStore()

  it("delete_service: its whole group has ended when the answer comes", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const { server, pgid } = await start(o, flags, "deleted", await store())
    const reply = await server.del("/for_store/delete_service/deleted")
    expect(reply.status).toBe(200)
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("disconnect_service: its whole group has ended when the answer (disconnected) comes", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const { server, pgid } = await start(o, flags, "disconnected", await store())
    const reply = await server.post("/for_store/disconnect_service", { service_name: "disconnected" })
    expect(reply.body).toMatchObject({ success: true, status: "disconnected" })
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("restart_service: the old group has ended once the new server is healthy", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const { server, pgid } = await start(o, flags, "restarted", await store())
    const log = recordStatuses(server.running.store.forStore().findService("restarted")!)
    try {
      const reply = await server.post("/for_store/restart_service", { service_name: "restarted" })
      expect(reply.status).toBe(200)
      // Healthy again after the restart (the log starts with the status before it, healthy too).
      const again = () => {
        const seen = log.statuses()
        return seen.indexOf("initializing") !== -1 && seen.slice(seen.indexOf("initializing")).includes("healthy")
      }
      expect(await eventually(again, 15_000)).toBe(true)
      // From the restart on (a slow health check on a loaded machine may have shown "warning" before it).
      const seen = log.statuses()
      expect(seen.slice(seen.indexOf("initializing")), seen.join(", ")).toEqual(["initializing", "healthy"])
    } finally {
      log.stop()
    }
    // Closing the old connection is not awaited by the restart: allow it a moment.
    expect(await eventually(() => !groupRunning(pgid), 3_000)).toBe(true)
    const fresh = await tree(o, server, "restarted")
    expect(fresh.pgid).not.toBe(pgid)
    // Its new group ends with the service (not left to the store's end).
    expect((await server.del("/for_store/delete_service/restarted")).status).toBe(200)
  })

  it("server shutdown: its whole group has ended when close() resolves", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const { server, pgid } = await start(o, flags)
    await server.close()
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("the server process killed with SIGKILL: the rest of its group is ended too", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const { server, pgid, grandchild } = await start(o, flags, "killed", await store())
    process.kill(pgid, "SIGKILL")
    // SIGTERM to the group at once, SIGKILL after the 2 s grace period.
    expect(await eventually(() => !groupRunning(pgid), 4_000)).toBe(true)
    expect(liveGroupMembers(pgid)).not.toContain(grandchild)
    // The service deleted: the shared store does not go on reconnecting it (a new server each time).
    expect((await server.del("/for_store/delete_service/killed")).status).toBe(200)
  })
})

describe.concurrent("an agent's local server with a grandchild that ignores SIGTERM", () => {
  it("agent delete_service and reset_config end the whole group", { timeout: 25_000 }, async (context) => {
    const o = own(context)
    const server = (o.server = await startTestServer({ monitoring: FAULT_MONITORING }))
    const flags = ["--spawn-grandchild", "--grandchild-ignores-sigterm"]
    const added = await server.post("/for_agent/a1/add_service?wait=15", [fixtureService("one", ...flags), fixtureService("two", ...flags)])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    const pgidOf = async (name: string) =>
      Number(firstText((await server.post("/for_agent/a1/call_tool", { tool_name: `${name}__pid` })).body.content))
    const one = await pgidOf("one")
    const two = await pgidOf("two")
    o.groups.add(one).add(two)
    expect(liveGroupMembers(one)).toHaveLength(2)
    expect(liveGroupMembers(two)).toHaveLength(2)
    expect((await server.del("/for_agent/a1/delete_service/one")).status).toBe(200)
    expect(liveGroupMembers(one)).toEqual([])
    expect((await server.post("/for_agent/a1/reset_config")).status).toBe(200)
    expect(liveGroupMembers(two)).toEqual([])
  })
})
