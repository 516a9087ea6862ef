// Drives the web chat page in a real headless Chromium (the machine's /usr/bin/chromium, or
// CHROMIUM_PATH) with playwright-core: types a prompt, sends it, waits until the streamed
// answer is complete, keeps a screenshot and prints what the page shows as JSON.
//
//   node browser_check.mjs URL PROMPT SCREENSHOT_PATH
import { chromium } from 'playwright-core';

const [url, prompt, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
  const consoleErrors = [];
  page.on('console', message => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', error => consoleErrors.push(String(error)));
  await page.goto(url);
  await page.getByTestId('prompt').fill(prompt);
  await page.getByTestId('send').click();
  // The turn is over when the chat is ready again and an assistant message exists.
  await page.locator('[data-role="assistant"] [data-testid="tool-output"]').waitFor({ timeout: 60000 });
  await page.waitForFunction(
    () =>
      document.querySelector('[data-testid="status"]')?.textContent === 'ready' &&
      document.querySelector('[data-role="assistant"] .usage') !== null,
    null,
    { timeout: 60000 },
  );
  await page.screenshot({ path: screenshot, fullPage: true });
  const shown = await page.evaluate(() => {
    const assistant = document.querySelector('[data-role="assistant"]');
    const tool = assistant.querySelector('[data-testid="tool-call"]');
    return {
      user: [...document.querySelectorAll('[data-role="user"] .text')]
        .map(node => node.textContent)
        .join(''),
      text: [...assistant.querySelectorAll('.text')].map(node => node.textContent).join(''),
      reasoning: [...assistant.querySelectorAll('.reasoning')].map(node => node.textContent).join(''),
      tool: {
        name: tool.querySelector('.tool-name').textContent,
        state: tool.dataset.state,
        input: JSON.parse(tool.querySelector('.tool-input').textContent),
        output: JSON.parse(tool.querySelector('.tool-output').textContent),
      },
      usage: assistant.querySelector('.usage')?.textContent,
      error: document.querySelector('[data-testid="error"]')?.textContent ?? null,
    };
  });
  console.log(JSON.stringify({ ...shown, consoleErrors }));
} finally {
  await browser.close();
}
