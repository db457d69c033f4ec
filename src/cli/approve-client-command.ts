/**
 * `mcp-store auth approve-client <client_id> --agent <id> [--tools <globs>] [--machine]`: approves a
 * client of the built-in authorization server ahead of time, without a server, as `keys create`
 * makes a key: the file beside the services file (src/config/oauth-server-file.ts) gets the
 * approval, and a running store reads it on its next authorization request. The client's
 * authorization then completes without the consent page. `--machine` makes a client-credentials
 * client and prints its secret once (the file keeps its hash); a machine client whose metadata
 * document carries its keys authenticates with `private_key_jwt` and needs no secret (`--no-secret`).
 */
import { resolve as resolvePath } from "node:path"
import { Command, CommanderError, Option } from "commander"
import { freshSecret, OAuthServerFileError, oauthServerFileOf, readOAuthServerFile, sha256, writeOAuthServerFile, type ApprovedClient } from "../config/oauth-server-file.js"
import { approvalProblem } from "../http/oauth-server/grants.js"

/** Where the command writes and what relative paths resolve against. */
export interface ApproveClientIo {
  readonly cwd?: string
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

/** Runs the command (argv after `auth approve-client`); resolves with the exit code: 0 done, 1 the file failed, 2 a usage error. */
export const runApproveClient = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: ApproveClientIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => void process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => void process.stderr.write(text))
  const cwd = io.cwd ?? process.cwd()
  const program = new Command("mcp-store auth approve-client")
    .description("approve a client of the built-in authorization server (--auth-server) and bind it to an agent")
    .argument("<client_id>", "the client's id: its metadata document's https URL (or a dcr_ id it registered)")
    .addOption(new Option("--agent <id>", "the agent whose MCP endpoint the client's tokens reach").makeOptionMandatory())
    .addOption(new Option("--tools <globs>", "comma list of globs over callable names <service>__<tool> the tokens may see and call (default: all of the agent's)"))
    .addOption(new Option("--machine", "a machine client (client credentials grant): prints a client secret once"))
    .addOption(new Option("--no-secret", "with --machine: no secret; the client signs with a key of its metadata document (private_key_jwt)"))
    .addOption(new Option("--config <file>", "the services file, beside which the authorization server's file is (default: MCPSTORE_CONFIG or ./mcp.json)"))
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  try {
    await program.parseAsync([...argv], { from: "user" })
  } catch (e) {
    if (!(e instanceof CommanderError)) throw e
    if (e.code === "commander.helpDisplayed" || e.code === "commander.help") return 0
    err(`mcp-store auth approve-client: ${e.message.replace(/^error: /, "")}\n`)
    return 2
  }
  const clientId = program.args[0] as string
  const opts = program.opts<{ agent: string; tools?: string; machine?: boolean; secret: boolean; config?: string }>()
  const tools = opts.tools === undefined ? null : opts.tools.split(",").map((t) => t.trim()).filter((t) => t !== "")
  // http client ids on loopback are accepted here; the server takes them only with --auth-dev-loopback-clients.
  const problem = approvalProblem(clientId, opts.agent, tools, true)
  if (problem !== undefined) {
    err(`mcp-store auth approve-client: ${problem}\n`)
    return 2
  }
  const machine = opts.machine === true
  const secret = machine && opts.secret ? freshSecret() : undefined
  const config = opts.config ?? ([env["MCPSTORE_CONFIG"], env["MCPSTORE_MCP_CONFIG_FILE"]].find((v) => v !== undefined && v !== "") || "mcp.json")
  const path = oauthServerFileOf(resolvePath(cwd, config))
  try {
    const { doc } = await readOAuthServerFile(path)
    const entry: ApprovedClient = { agent: opts.agent, tools, machine, secret_sha256: secret === undefined ? null : sha256(secret), approved: new Date().toISOString(), approved_by: "cli" }
    await writeOAuthServerFile(path, { ...doc, clients: { ...doc.clients, [clientId]: entry } })
  } catch (e) {
    if (e instanceof OAuthServerFileError || (typeof e === "object" && e !== null && "code" in e)) {
      err(`mcp-store auth approve-client: ${(e as Error).message}\n`)
      return 1
    }
    throw e
  }
  err(`approved ${clientId} for agent '${opts.agent}'${tools === null ? "" : ` (tools ${tools.join(",")})`}${machine ? " as a machine client" : ""} in ${path}\n`)
  if (secret !== undefined) {
    err("its client secret is shown once:\n")
    out(`${secret}\n`)
  }
  return 0
}
