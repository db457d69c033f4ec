// Local servers that start grandchildren (the stdio fixture's --spawn-grandchild, also with a
// grandchild that ignores SIGTERM): after delete, disconnect, restart, the server's shutdown, or the
// server process dying by itself, no live process of its process group is left. Members are counted
// from /proc, zombies ignored (this machine's init does not reap orphans, so a killed grandchild may
// stay a zombie for ever).
import { afterEach, describe, expect, it } from "vitest"
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

let server: TestServer | undefined
const groups = new Set<number>()

afterEach(async () => {
  await server?.cleanup()
  server = undefined
  for (const pgid of groups) killGroup(pgid) // only when a test failed half-way
  groups.clear()
}, 20_000)

const VARIANTS: ReadonlyArray<[string, ReadonlyArray<string>]> = [
  ["a grandchild", ["--spawn-grandchild"]],
  ["a grandchild that ignores SIGTERM", ["--spawn-grandchild", "--grandchild-ignores-sigterm"]]
]

/** Starts a store with the fixture as service `gc`; returns the process group (the server's pid) and the grandchild's pid. */
const start = async (flags: ReadonlyArray<string>) => {
  server = await startTestServer({ monitoring: FAULT_MONITORING })
  const added = await server.post("/for_store/add_service?wait=15", fixtureService("gc", ...flags))
  expect(added.body.services[0].status).toBe("healthy")
  return tree()
}

/** The live server's pid (its group id) and its grandchild's pid, asked through the store. */
const tree = async () => {
  const pid = Number(firstText((await server!.post("/for_store/call_tool", { tool_name: "gc__pid" })).body.content))
  const grandchild = Number(firstText((await server!.post("/for_store/call_tool", { tool_name: "gc__grandchild_pid" })).body.content))
  groups.add(pid)
  // The server leads its own group; the grandchild stays in it.
  expect(processGroupOf(pid)).toBe(pid)
  expect(processGroupOf(grandchild)).toBe(pid)
  expect(liveGroupMembers(pid).sort()).toEqual([pid, grandchild].sort())
  return { pgid: pid, grandchild }
}

describe.each(VARIANTS)("a local server with %s", (_label, flags) => {
  it("delete_service: its whole group has ended when the answer comes", { timeout: 20_000 }, async () => {
    const { pgid } = await start(flags)
    const reply = await server!.del("/for_store/delete_service/gc")
    expect(reply.status).toBe(200)
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("disconnect_service: its whole group has ended when the answer (disconnected) comes", { timeout: 20_000 }, async () => {
    const { pgid } = await start(flags)
    const reply = await server!.post("/for_store/disconnect_service", { service_name: "gc" })
    expect(reply.body).toMatchObject({ success: true, status: "disconnected" })
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("restart_service: the old group has ended once the new server is healthy", { timeout: 20_000 }, async () => {
    const { pgid } = await start(flags)
    const log = recordStatuses(server!.running.store.forStore().findService("gc")!)
    try {
      const reply = await server!.post("/for_store/restart_service", { service_name: "gc" })
      expect(reply.status).toBe(200)
      expect(await log.waitFor("healthy", 15_000)).toBe(true)
      expect(log.statuses()).toEqual(["initializing", "healthy"])
    } finally {
      log.stop()
    }
    // Closing the old connection is not awaited by the restart: allow it a moment.
    expect(await eventually(() => !groupRunning(pgid), 3_000)).toBe(true)
    const fresh = await tree()
    expect(fresh.pgid).not.toBe(pgid)
  })

  it("server shutdown: its whole group has ended when close() resolves", { timeout: 20_000 }, async () => {
    const { pgid } = await start(flags)
    await server!.close()
    expect(liveGroupMembers(pgid)).toEqual([])
  })

  it("the server process killed with SIGKILL: the rest of its group is ended too", { timeout: 20_000 }, async () => {
    const { pgid, grandchild } = await start(flags)
    process.kill(pgid, "SIGKILL")
    // SIGTERM to the group at once, SIGKILL after the 2 s grace period.
    expect(await eventually(() => !groupRunning(pgid), 4_000)).toBe(true)
    expect(liveGroupMembers(pgid)).not.toContain(grandchild)
  })
})

describe("an agent's local server with a grandchild that ignores SIGTERM", () => {
  it("agent delete_service and reset_config end the whole group", { timeout: 25_000 }, async () => {
    server = await startTestServer({ monitoring: FAULT_MONITORING })
    const flags = ["--spawn-grandchild", "--grandchild-ignores-sigterm"]
    const added = await server.post("/for_agent/a1/add_service?wait=15", [fixtureService("one", ...flags), fixtureService("two", ...flags)])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    const pgidOf = async (name: string) =>
      Number(firstText((await server!.post("/for_agent/a1/call_tool", { tool_name: `${name}__pid` })).body.content))
    const one = await pgidOf("one")
    const two = await pgidOf("two")
    groups.add(one).add(two)
    expect(liveGroupMembers(one)).toHaveLength(2)
    expect(liveGroupMembers(two)).toHaveLength(2)
    expect((await server.del("/for_agent/a1/delete_service/one")).status).toBe(200)
    expect(liveGroupMembers(one)).toEqual([])
    expect((await server.post("/for_agent/a1/reset_config")).status).toBe(200)
    expect(liveGroupMembers(two)).toEqual([])
  })
})
