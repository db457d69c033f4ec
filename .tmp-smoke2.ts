import { spawn } from "node:child_process"
import { connect } from "./src/mcp/connect.js"
import { everythingHttp, LISTENING_LINE } from "./test/fixtures/paths.js"
for (const mode of ["streamableHttp", "sse"] as const) {
  const l = everythingHttp(mode)
  const p = spawn(l.command, [...l.args], { env: { ...process.env, ...l.env }, stdio: ["ignore", "pipe", "pipe"] })
  let err = ""
  const port = await new Promise<number>((res) => p.stderr.on("data", (c) => { err += c; const m = LISTENING_LINE.exec(err); if (m) res(Number(m[1])) }))
  console.log(mode, port, err)
  const c = await connect({ kind: "remote", transport: mode === "sse" ? "sse" : "streamable_http", url: `http://127.0.0.1:${port}/${mode === "sse" ? "sse" : "mcp"}`, headers: { "x-test": "1" } }, { timeoutMs: 5000 })
  console.log(c.serverInfo, (await c.listTools({ timeoutMs: 5000 })).length, JSON.stringify(await c.callTool("echo", { message: "hi" }, { timeoutMs: 5000 })), await c.ping({ timeoutMs: 3000 }))
  const t = Date.now(); await c.close(); console.log("closed", Date.now() - t)
  p.kill()
}
