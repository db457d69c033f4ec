/**
 * The `mcp-store` program's entry point: runs the command line and exits with its code once the
 * server has shut down. bin/mcp-store.js runs it from the sources; `npm start` from the bundle.
 */
import { main } from "./main.js"

process.exitCode = await main(process.argv.slice(2))
