import { connect } from "./src/mcp/connect.js"
import { stdioFixture, demoServer, everythingStdio } from "./test/fixtures/paths.js"
const local = (l: { command: string; args: ReadonlyArray<string> }) => ({ kind: "local" as const, transport: "stdio" as const, command: l.command, args: l.args, env: {}, cwd: "/" })
for (const l of [demoServer, stdioFixture("--stderr-lines", "3"), everythingStdio]) {
  const t0 = Date.now()
  const c = await connect(local(l), { timeoutMs: 10000 })
  console.log(c.serverInfo, Date.now() - t0, "ms", (await c.listTools({ timeoutMs: 5000 })).map((t) => t.name).join(","))
  console.log(await c.ping({ timeoutMs: 5000 }))
  const first = (await c.listTools({ timeoutMs: 5000 }))[0]!.name
  if (c.serverInfo?.name === "demo") console.log(JSON.stringify(await c.callTool("get_time", { timezone: "Europe/Paris" }, { timeoutMs: 5000 })), JSON.stringify(await c.callTool("add", { a: 1, b: 2 }, { timeoutMs: 5000 })))
  console.log(c.stderrTail())
  const t1 = Date.now(); await c.close(); console.log("closed in", Date.now() - t1)
}
try { await connect(local(stdioFixture("--exit-immediately")), { timeoutMs: 5000 }) } catch (e) { console.log((e as any).kind, (e as Error).message) }
try { await connect(local({ command: "nope-xyz", args: [] }), { timeoutMs: 5000 }) } catch (e) { console.log((e as any).kind, (e as Error).message) }
try { await connect({ kind: "remote", transport: "streamable_http", url: "http://127.0.0.1:1/mcp", headers: {} }, { timeoutMs: 5000 }) } catch (e) { console.log((e as any).kind, (e as Error).message) }
try { await connect({ kind: "remote", transport: "sse", url: "http://127.0.0.1:1/sse", headers: {} }, { timeoutMs: 5000 }) } catch (e) { console.log((e as any).kind, (e as Error).message) }
