terraform {
  required_version = ">= 1.6.0"
  required_providers {
    aws = { source = "hashicorp/aws", version = "~> 5.40" }
  }
}

resource "aws_s3_bucket" "invoices" {
  bucket = "acme-prod-invoices"
  tags   = { CostCenter = "billing-platform", ManagedBy = "terraform" }
}

resource "aws_kms_key" "invoices" {
  description             = "Encrypts invoice PDFs at rest"
  deletion_window_in_days = 30
  enable_key_rotation     = true
}

data "aws_iam_policy_document" "invoice_writer" {
  statement {
    actions   = ["s3:PutObject", "s3:GetObject"]
    resources = ["${aws_s3_bucket.invoices.arn}/*"]
  }
  statement {
    actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
    resources = ["arn:aws:kms:eu-central-1:123456789012:key/37bac233-b133-4c3f-997a-14e2ac084ba5"]
  }
}

module "vpc" {
  source  = "terraform-aws-modules/vpc/aws"
  version = "5.5.2"
  name    = "payments-production"
  cidr    = "10.40.0.0/16"
  azs     = ["eu-central-1a", "eu-central-1b", "eu-central-1c"]
}
# state lock id: b578909c-4a75-41f2-bd57-5d17acfb2d5e
# plan checksum: 8449767777c41efee48c334ffa15ef79044a7513d181f7fe73fe446335eaf2ee
